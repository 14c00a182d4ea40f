"""A stand-in for a short training run: reads the plan file autopar tune wrote and prints a
step time by the trial protocol (solvers/tune.py). Deterministic: measured = predicted x
(1.05 + 0.02 mbs). zero=3 fails with an NCCL error (exit 3, no step line); pp >= 12 or
mbs >= 4 runs out of memory (CUDA's message, exit 1)."""

import json
import sys

data = json.load(open(sys.argv[1]))
plan, est = data["plans"][0]["plan"], data["plans"][0]["estimate"]
if plan["zero"] == 3:
    print("NCCL error: unhandled system error", file=sys.stderr)
    sys.exit(3)
if plan["pp"] >= 12 or plan["mbs"] >= 4:
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    sys.exit(1)
print("iteration 1 ... (warmup)")
print(f"autopar-step-seconds: {est['step_seconds'] * (1.05 + 0.02 * plan['mbs']):.6f}")
