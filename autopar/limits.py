"""Sane limits on input counts, checked at the input boundary (CLI options, sweep files,
ClusterSpec.with_gpus): a typo of a few digits must fail at once with a clear message, not
enumerate a plan space for hours. Each limit is several times the largest real value."""

MAX_GPUS = 2**20
"""1,048,576 GPUs: about 5x xAI Colossus (~200,000 GPUs), the largest cluster built by 2025."""

MAX_SEQ_LEN = 2**24
"""16,777,216 tokens per sequence; the longest context a released model was trained for is 10M (Llama 4 Scout)."""

MAX_TOKENS_PER_STEP = 2**32
"""4.3e9 tokens per optimizer step; DeepSeek-V3's largest global batch was 15,360 x 4,096 = 63M."""

MAX_NIC_GB_PER_S_PER_GPU = 100.0
"""100 GB/s = 800 Gb/s of scale-out NIC per GPU: one ConnectX-8 SuperNIC (up to 800 Gb/s, NVIDIA's
ConnectX-8 SuperNIC datasheet) per GPU, the fastest NIC shipping (DGX B300, GB300 NVL72:
profiles/clusters/dgx-b300.yaml, gb300-nvl72.yaml). Unlike the other limits it is the largest real
value itself, not a multiple: the typo it catches, a NIC's Gb/s (bits) typed into the GB/s field
(400 for ConnectX-7's 50 GB/s), is 8x too large. Raise it when a faster NIC ships."""

MAX_TOP_K = 1000
"""Plans one search ranks; each ranked plan is fully estimated and printed."""

# Model shapes (ModelSpec): each several times the largest released model's value.
MAX_LAYERS = 2**14
"""16,384 layers; the deepest released LLMs have 126-128 (LLaMA 3.1 405B: 126)."""

MAX_WIDTH = 2**20
"""1,048,576 for hidden and FFN widths; the widest released FFN is 53,248 (LLaMA 3.1 405B)."""

MAX_HEADS = 2**14
"""16,384 attention heads; released models have at most 128 (LLaMA 3.1 405B, DeepSeek-V3)."""

MAX_VOCAB = 2**24
"""16,777,216 tokens of vocabulary; the largest released vocabularies are ~262K (Gemma 3)."""

MAX_EXPERTS = 2**16
"""65,536 routed experts per MoE layer; released models have at most 384 (Kimi K2)."""
