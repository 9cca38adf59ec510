"""What one engine iteration costs, in time and in GPU memory.

- iteration.py  time of one iteration on one replica, from the shared op and collective costs
- constants.py  the engines' constants (defaults, then fitted overrides)
- graphs.py     which iterations replay a CUDA graph; the host floor of those that do not
- memory.py     weights, activation peak, reserved buffers and the KV cache left
- kvquant.py    4-bit and 2-bit KV cache (KIVI-style)
- lora.py       multi-LoRA serving: adapter slots, bytes and time
"""
