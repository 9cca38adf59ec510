"""Bytes per GPU of a training plan, per pipeline stage.

- total.py              the per-stage peak and whether it fits (estimate_memory)
- states.py             weights, gradients, master weights and optimizer states
- activations.py        bytes a layer saves for backward, by kernel profile and recompute
- profile_hf.py         saved tensors of Hugging Face models (eager, sdpa)
- profile_torchtitan.py saved tensors of torchtitan's Llama-style model
- report.py             a MemoryEstimate as a plain dict
"""
