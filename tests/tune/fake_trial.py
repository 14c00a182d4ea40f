"""A stand-in for a short training run: reads the plan file autopar tune wrote and prints a
step time by the trial protocol (solvers/tune.py). Deterministic: measured = predicted x
(1.05 + 0.02 mbs). cp_algo=hybrid, mbs >= 4, tp=4 with cp=2, or tp=2 with pp=12 runs out of memory (CUDA's message, exit 1);
cp_algo=ulysses fails with an NCCL error (exit 3, no step line)."""

import json
import sys

data = json.load(open(sys.argv[1]))
plan, est = data["plans"][0]["plan"], data["plans"][0]["estimate"]
if plan["cp_algo"] == "hybrid" or plan["mbs"] >= 4 or (plan["tp"], plan["cp"]) == (4, 2) or (plan["tp"], plan["pp"]) == (2, 12):
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    sys.exit(1)
if plan["cp_algo"] == "ulysses":
    print("NCCL error: unhandled system error", file=sys.stderr)
    sys.exit(3)
print("iteration 1 ... (warmup)")
print(f"autopar-step-seconds: {est['step_seconds'] * (1.05 + 0.02 * plan['mbs']):.6f}")
