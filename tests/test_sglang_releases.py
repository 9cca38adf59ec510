"""SGLang defaults by release, as read from the PyPI wheels 0.4.0 ... 0.5.23 (issue #32 item 1).

SGLang never released 0.6: the rows used to be keyed "0.4 to <0.5", "0.5 to <0.6" and ">= 0.6" and
read from unattributed copies, so every 0.5.x release took one 0.5-era rule and the 0.4 series
one 0.4.0-era rule. Each case below fails on those rows."""

from __future__ import annotations

import pytest

from meshplan.hardware import get_gpu
from meshplan.serving.engine.defaults import engine_defaults, knobs, sglang_mem_fraction_static
from meshplan.serving.versions import in_range, parse_post, resolve_version

H100 = get_gpu("h100-sxm-80gb")
H200 = get_gpu("h200-sxm-141gb")
B200 = get_gpu("b200-180gb")
L40S = get_gpu("l40s-48gb")
MI300X = get_gpu("mi300x-192gb")
RTX4090_BYTES = 24564 * 2**20  # nvidia-smi memory.total of an RTX 4090: 23.99 GiB, under 25,000 MiB
GIB32 = 32 * 2**30


def sgl(gpu, version, tp=1):
    return engine_defaults("sglang", gpu.hbm_bytes, gpu_name=gpu.name, tp=tp, version=version)


def mib(gpu) -> float:
    return gpu.hbm_bytes / 2**20


# --- post releases -------------------------------------------------------------------------------

def test_post_releases_order_between_their_release_and_the_next():
    assert parse_post("0.4.6.post2") == 2 and parse_post("0.5.6") == 0 and parse_post("v0.19.1 (post-fix)") == 0
    assert resolve_version("sglang", "0.5.1.post3").label() == "0.5.1.post3"
    assert not in_range((0, 4, 6), "0.4.6.post2", "0.4.7")
    assert in_range((0, 4, 6), "0.4.6.post2", "0.4.7", post=2)
    assert in_range((0, 4, 6), "0.4", "0.4.6.post2", post=1)
    assert not in_range((0, 4, 7), "0.4", "0.4.6.post2")


# --- chunked_prefill_size ------------------------------------------------------------------------

def test_chunk_cut_is_25000_mib_not_mb():
    """0.4.x compares nvidia-smi MiB with 25,000: a 4090 (24,564 MiB) is below it."""
    assert engine_defaults("sglang", RTX4090_BYTES, version="0.4.6").max_num_batched_tokens == 2048


@pytest.mark.parametrize(("gpu", "version", "chunk"), [
    (B200, "0.4.6", 8192),
    (B200, "0.4.7", 16384),      # > 180,000 MiB in 0.4.7
    (MI300X, "0.4.7", 16384),
    (L40S, "0.4.9", 8192),       # 0.4.7.post1-0.5.2 bands: < 35 GiB, < 160 GiB, above
    (L40S, "0.5.1.post3", 8192),
    (L40S, "0.5.3", 4096),       # the 35-60 GiB band from 0.5.3
    (L40S, "0.5.6", 4096),
])
def test_chunked_prefill_size_by_release(gpu, version, chunk):
    assert sgl(gpu, version).max_num_batched_tokens == chunk


def test_20_to_35_gib_band_moved_in_0_5_20():
    old, new = (engine_defaults("sglang", GIB32, tp=2, version=v) for v in ("0.5.6", "0.5.23"))
    assert (old.max_num_batched_tokens, old.cuda_graph_max_batch) == (2048, 24)
    assert (new.max_num_batched_tokens, new.cuda_graph_max_batch) == (4096, 48)
    assert engine_defaults("sglang", GIB32, tp=2, version="0.5.4").cuda_graph_max_batch == 16
    assert engine_defaults("sglang", GIB32, tp=2, version="0.5.4.post1").cuda_graph_max_batch == 24


# --- cuda_graph_max_bs ---------------------------------------------------------------------------

@pytest.mark.parametrize(("gpu", "version", "tp", "graph"), [
    (H200, "0.4.0", 8, 160),
    (MI300X, "0.4.3", 8, 256),   # AMD sizes appended after the cut, 0.4.3 to <0.4.3.post3
    (MI300X, "0.4.4", 8, 160),
    (H200, "0.4.6", 8, 256),     # > 81,920 MiB adds 168..256
    (H100, "0.4.6", 8, 160),
    (B200, "0.4.9", 8, 512),     # > 160,000 MiB adds 272..512
    (H200, "0.4.9", 8, 256),
    (H100, "0.5.1.post3", 8, 160),
    (H100, "0.5.3", 8, 512),
    (H100, "0.5.3", 1, 256),
])
def test_decode_graph_max_batch_by_release(gpu, version, tp, graph):
    assert sgl(gpu, version, tp=tp).cuda_graph_max_batch == graph


# --- mem_fraction_static -------------------------------------------------------------------------

def test_mem_fraction_by_tp_then_reserve_above_80_gib():
    assert sgl(H100, "0.4.6", tp=8).gpu_memory_utilization == 0.81
    assert sgl(H200, "0.4.6", tp=8).gpu_memory_utilization == round((mib(H200) - 13 * 1024) / mib(H200), 3)
    assert sgl(H200, "0.4.6.post2", tp=8).gpu_memory_utilization == round((mib(H200) - 18 * 1024) / mib(H200), 3)
    assert sgl(B200, "0.4.7", tp=8).gpu_memory_utilization == 0.79     # CUDA above 180,000 MiB
    assert sgl(MI300X, "0.4.7", tp=8).gpu_memory_utilization == round((mib(MI300X) - 18 * 1024) / mib(MI300X), 3)


@pytest.mark.parametrize(("gpu", "tp", "reserve_gib"), [
    (H100, 8, 9.5 + 8 / 2),
    (H200, 8, 12 + 8 / 2),
    (B200, 1, 32),
    (L40S, 1, 9.5 + 1 / 2),
])
def test_mem_fraction_banded_reserve_0_4_7_post1_to_0_5_2(gpu, tp, reserve_gib):
    expected = round((mib(gpu) - reserve_gib * 1024) / mib(gpu), 3)
    for version in ("0.4.9", "0.5.1.post3"):
        assert sgl(gpu, version, tp=tp).gpu_memory_utilization == expected


def test_prefill_graph_reserve_only_once_prefill_graphs_are_default():
    """0.5.3-0.5.9: no prefill-graph term (piecewise graphs opt-in); 0.5.10+: 8 MiB per size."""
    reserved = 512 + 8192 * 1.5 + 8 / 8 * 1024 + 512 * 2
    assert sgl(H100, "0.5.6", tp=8).gpu_memory_utilization == round((mib(H100) - reserved) / mib(H100), 3)
    assert sglang_mem_fraction_static(H100.hbm_bytes, 8192, 512, tp=8, version="0.5.10") < \
        sglang_mem_fraction_static(H100.hbm_bytes, 8192, 512, tp=8, version="0.5.9")


# --- schedule_policy and the sources -------------------------------------------------------------

@pytest.mark.parametrize(("version", "policy"), [
    ("0.4.3", "lpm"), ("0.4.3.post2", "lpm"), ("0.4.3.post3", "fcfs"), ("0.4.6", "fcfs"), ("0.5.23", "fcfs"),
])
def test_schedule_policy_by_release(version, policy):
    assert sgl(H100, version).scheduler_policy == policy


def test_every_sglang_row_cites_a_wheel_and_real_releases():
    releases = knobs("sglang")
    for name, entry in releases.items():
        for row in entry.get("versions", [entry]):
            for bound in (row.get("since"), row.get("before")):
                assert bound is None or not bound.startswith(("0.6", "0.5 ", "0.5\"")), (name, bound)
            assert "PyPI wheel" in str(row["source"]["version_or_commit"]), name
            assert row.get("verified", True), name
    assert resolve_version("sglang", "main").note.endswith("SGLang 0.5.23 defaults")
