"""Measured twin of the host bytes an offloaded optimizer keeps per parameter
(`offload.swapped_bytes`): build the host side of ZeRO-Offload in PyTorch on CPU (an fp32 master
copy of bf16 weights, its fp32 gradient, the optimizer's state after one step) and count the
bytes of every tensor."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from meshplan import Cluster, TrainingPlan, load_model, resolve_plan  # noqa: E402
from meshplan.training.time.offload import swapped_bytes  # noqa: E402
from meshplan.training.memory.states import state_bytes  # noqa: E402


def _host_bytes_per_param(optimizer: str) -> float:
    weights = [torch.randn(64, 32, dtype=torch.bfloat16), torch.randn(32, dtype=torch.bfloat16)]
    master = [w.detach().float().requires_grad_() for w in weights]  # host fp32 copy
    for m in master:
        m.grad = torch.randn_like(m)  # the fp32 gradient CPU-Adam reads
    opt = (torch.optim.AdamW(master) if optimizer == "adamw"
           else torch.optim.SGD(master, lr=0.1, momentum=0.9))
    opt.step()
    tensors = [*master, *(m.grad for m in master)]
    tensors += [v for state in opt.state.values() for v in state.values()
                if torch.is_tensor(v) and v.numel() > 1]  # moments (not Adam's step counter)
    params = sum(m.numel() for m in master)
    return sum(t.numel() * t.element_size() for t in tensors) / params


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_offloaded_optimizer_bytes_match_pytorch(optimizer):
    model, cluster = load_model("llama-3.2-1b"), Cluster.build("h100-sxm-80gb", 1)
    plan = resolve_plan(TrainingPlan(framework="deepspeed", dp_sharding="gradients", optimizer=optimizer,
                                     offload_optimizer=True, micro_batch_size=1), model, cluster)
    predicted = swapped_bytes(state_bytes(plan, model.hidden_size))
    assert predicted == _host_bytes_per_param(optimizer)
