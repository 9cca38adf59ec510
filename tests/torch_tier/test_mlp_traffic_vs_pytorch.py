"""The serving cost model's memory-bound MLP passes against the tensors reference forwards in
PyTorch materialise: an MoE layer's gather into expert order, gated activation and weighted
combine, and a dense MLP's activation.

The MoE reference routes each token to its top-k experts, runs them expert by expert on
expert-contiguous rows (the layout grouped-GEMM kernels use) and is checked against a per-token
dense evaluation first, so the bytes counted are those of a correct MoE layer. Tolerance: exact
(the count is of whole tensors)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from meshplan.serving.cost.iteration import activation_bytes, moe_traffic_bytes  # noqa: E402


def _reference_moe(x, router, w_gate_up, w_down, top_k):
    """(output, {pass: bytes read + written}) of a SwiGLU MoE layer in bf16."""
    weights, experts = torch.softmax(x.float() @ router, dim=-1).topk(top_k, dim=-1)
    pair_expert = experts.reshape(-1)
    pair_token = torch.arange(x.shape[0]).repeat_interleave(top_k)
    order = torch.argsort(pair_expert, stable=True)
    gathered = x.index_select(0, pair_token[order])  # expert-contiguous rows
    counts = torch.bincount(pair_expert, minlength=w_gate_up.shape[0]).tolist()
    gate_up = torch.cat([rows @ w_gate_up[e] for e, rows in enumerate(gathered.split(counts))])
    gate, up = gate_up.chunk(2, dim=-1)
    act = torch.nn.functional.silu(gate) * up
    down = torch.cat([rows @ w_down[e] for e, rows in enumerate(act.split(counts))])
    scaled = down * weights.reshape(-1)[order, None].to(down.dtype)
    out = torch.zeros_like(x).index_add_(0, pair_token[order], scaled)
    nbytes = {"gather": x.nbytes + gathered.nbytes, "activation": gate_up.nbytes + act.nbytes,
              "combine": down.nbytes + out.nbytes}
    return out, nbytes


def _per_token(x, router, w_gate_up, w_down, top_k):
    weights, experts = torch.softmax(x.float() @ router, dim=-1).topk(top_k, dim=-1)
    rows = []
    for t in range(x.shape[0]):
        acc = torch.zeros(x.shape[1], dtype=torch.float32)
        for w, e in zip(weights[t], experts[t]):
            gate, up = (x[t].float() @ w_gate_up[e].float()).chunk(2)
            acc += w * ((torch.nn.functional.silu(gate) * up) @ w_down[e].float())
        rows.append(acc)
    return torch.stack(rows)


@pytest.mark.parametrize("tokens,hidden,inter,experts,top_k", [(6, 64, 24, 8, 2), (5, 96, 40, 16, 4)])
def test_moe_traffic_counts_the_reference_tensors(tokens, hidden, inter, experts, top_k):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(tokens, hidden, generator=g).to(torch.bfloat16)
    router = torch.randn(hidden, experts, generator=g)
    w_gate_up = (torch.randn(experts, hidden, 2 * inter, generator=g) / hidden ** 0.5).to(torch.bfloat16)
    w_down = (torch.randn(experts, inter, hidden, generator=g) / inter ** 0.5).to(torch.bfloat16)
    out, nbytes = _reference_moe(x, router, w_gate_up, w_down, top_k)
    torch.testing.assert_close(out.float(), _per_token(x, router, w_gate_up, w_down, top_k), atol=0.05, rtol=0.05)
    routed = tokens * top_k
    assert moe_traffic_bytes(hidden, inter, True, tokens, routed) == sum(nbytes.values())


@pytest.mark.parametrize("gated", [True, False])
def test_dense_activation_counts_the_reference_tensors(gated):
    # A dense MLP's activation kernel: SwiGLU reads gate and up and writes their product; a
    # plain GELU MLP reads and writes one intermediate row.
    g = torch.Generator().manual_seed(5)
    rows, hidden, inter = 7, 64, 48
    x = torch.randn(rows, hidden, generator=g).to(torch.bfloat16)
    w_in = torch.randn(hidden, inter * (2 if gated else 1), generator=g).to(torch.bfloat16)
    pre = x @ w_in
    if gated:
        gate, up = pre.chunk(2, dim=-1)
        act = torch.nn.functional.silu(gate) * up
    else:
        act = torch.nn.functional.gelu(pre)
    assert activation_bytes(rows, inter, gated) == pre.nbytes + act.nbytes
