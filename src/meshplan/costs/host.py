"""Host time of launching work eagerly from Python, shared by the training and serving models.

A framework that runs eagerly dispatches every op of a layer from the host; the GPU runs ahead
only while its kernels take longer than their dispatch, so small work costs max(device time,
ops x host time per op). Captured graphs (CUDA graphs, XLA) remove the per-op host time.
"""

from __future__ import annotations

HOST_OP_S = 6.0e-6
"""Host time of one op dispatched from Python: the module code around it, PyTorch's dispatcher
(a few microseconds per op) and, for ops that run a kernel, cudaLaunchKernel (~2-3 us). One
physical assumption for every Python framework and both directions (the autograd engine
dispatches backward ops through the same dispatcher); not fitted."""

OPS_PER_KERNEL = 2.0
"""Ops dispatched per kernel launched: views, transposes and reshapes go through the dispatcher
without launching anything. Measured in the torch tier (tests/torch_tier/test_dispatch_counts.py):
a Hugging Face Llama decoder layer dispatches 72 ops, 36 of them kernels, decoding one token."""
