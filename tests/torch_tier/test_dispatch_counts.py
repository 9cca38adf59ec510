"""Ops PyTorch dispatches per decoder layer, against the host-floor data: a serving decode step
(costs/host.py OPS_PER_KERNEL) and a training forward + backward (training/data/
kernel_profiles.yaml, pytorch-eager). Counted with TorchDispatchMode on CPU: every op that reaches the
dispatcher, split into metadata ops (views, transposes, reshapes: no kernel) and the rest (one
kernel each on a GPU). The layer's count is the difference between a 2-layer and a 1-layer model
(embedding, final norm and head cancel). Tolerance: +-10% (the issue's bar for kernel counts)."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from meshplan.costs.host import OPS_PER_KERNEL  # noqa: E402
from meshplan.training.time.kernels import _profiles  # noqa: E402

METADATA = {"view", "_unsafe_view", "t", "transpose", "slice", "unsqueeze", "alias", "expand",
            "reshape", "permute", "select", "squeeze", "as_strided", "detach", "split", "chunk"}


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _decode_ops(layers: int) -> collections.Counter:
    cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=8,
                                   num_key_value_heads=2, num_hidden_layers=layers, vocab_size=1000)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    with torch.no_grad():
        cache = model(torch.randint(0, 1000, (1, 8)), use_cache=True).past_key_values
        count = _Count()
        with count:
            model(torch.randint(0, 1000, (1, 1)), past_key_values=cache, use_cache=True)
    return count.ops


def test_ops_dispatched_per_kernel_of_a_llama_decode_layer():
    layer = _decode_ops(2) - _decode_ops(1)
    total = sum(layer.values())
    kernels = sum(n for op, n in layer.items() if op not in METADATA)
    assert 7 <= layer["mm"] <= 8  # q, k, v, o, gate, up, down (+ nothing else)
    assert total / kernels == pytest.approx(OPS_PER_KERNEL, rel=0.10), (total, kernels, layer)


def _training_ops(family: str, layers: int) -> tuple[collections.Counter, collections.Counter]:
    if family == "llama":
        cfg = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=8,
                                       num_key_value_heads=2, num_hidden_layers=layers, vocab_size=1000)
    else:
        cfg = transformers.GPT2Config(n_embd=256, n_layer=layers, n_head=8, vocab_size=1000,
                                      bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()
    tokens = torch.randint(0, 1000, (2, 64))
    forward, backward = _Count(), _Count()
    with forward:
        loss = model(tokens, labels=tokens).loss
    with backward:
        loss.backward()
    return forward.ops, backward.ops


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_training_layer_ops_match_the_kernel_profile(family):
    one, two = _training_ops(family, 1), _training_ops(family, 2)
    measured = [sum((b - a).values()) for a, b in zip(one, two)]
    data = _profiles()["pytorch-eager"]["dense_layer_ops"][family]
    assert measured == pytest.approx(data, rel=0.10), (family, measured, data)
