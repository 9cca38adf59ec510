"""Engine version strings as records and users write them, and the defaults each release gets
(issue #32 item 1-2: an unreadable version used to pick TensorRT-LLM 1.0 PyTorch constants
silently; one version's defaults stood for every release)."""

from __future__ import annotations

import pytest

from meshplan.hardware import get_gpu
from meshplan.serving.cost.constants import constants_key, version_note
from meshplan.serving.engine.defaults import engine_defaults, knobs, sglang_mem_fraction_static
from meshplan.serving.versions import in_range, parse_release, resolve_version

H100 = get_gpu("h100-sxm-80gb")
B200 = get_gpu("b200-180gb")
L40S = get_gpu("l40s-48gb")


@pytest.mark.parametrize(("text", "release"), [
    ("1.0", (1, 0)),
    ("v1.1.0rc2", (1, 1, 0)),
    ("1.2.0.dev2025061000", (1, 2, 0)),
    ("0.5.4.post1", (0, 5, 4)),
    ("TensorRT-LLM 1.0 (PyTorch)", (1, 0)),
    ("trtllm-cpp 0.21", (0, 21)),
    ("0.5.0 (TensorRT 9.1.0.4)", (0, 5, 0)),
    ("1.0 (approx.: perf-overview.md revision, commit 00f37686)", (1, 0)),
    ("latest", None),
    ("main", None),
    ("PyTorch workflow; max-throughput B200 rows at commit b6261862", None),
    ("", None),
    (None, None),
])
def test_release_numbers(text, release):
    assert parse_release(text) == release


@pytest.mark.parametrize(("text", "backend", "key"), [
    ("1.0", "pytorch", "tensorrt-llm-pytorch"),
    ("v1.1.0rc2", "pytorch", "tensorrt-llm-pytorch"),
    ("1.2.0.dev2025061000", "pytorch", "tensorrt-llm-pytorch"),
    ("0.13.0", "cpp", "tensorrt-llm"),
    ("TensorRT-LLM 1.0 (PyTorch)", "pytorch", "tensorrt-llm-pytorch"),
    ("trtllm-cpp 0.21", "cpp", "tensorrt-llm"),
    ("trtllm-cpp", "cpp", "tensorrt-llm"),            # no number, the backend still counts
    ("0.21 (pytorch backend)", "pytorch", "tensorrt-llm-pytorch"),
    ("latest", "pytorch", "tensorrt-llm-pytorch"),
    (None, "pytorch", "tensorrt-llm-pytorch"),
])
def test_trtllm_backend_and_constants_row(text, backend, key):
    assert resolve_version("tensorrt-llm", text).backend == backend
    assert constants_key("tensorrt-llm", text) == key


@pytest.mark.parametrize("text", ["latest", "main", "TensorRT-LLM nightly",
                                  "PyTorch workflow; max-throughput B200 rows at commit b6261862"])
def test_a_version_without_a_number_gets_one_note_naming_the_choice(text):
    note = version_note("tensorrt-llm", text)
    assert note and repr(text) in note and "latest documented TensorRT-LLM 1.x PyTorch backend" in note
    assert "vLLM V1" in version_note("vllm", text) and "SGLang" in version_note("sglang", text)


def test_no_note_for_a_readable_or_absent_version():
    for text in ("0.13.0", "v0.19.1 (post-fix)", "0.5.4.post1", None, ""):
        assert version_note("vllm", text) is None
    assert "C++ runtime" in version_note("tensorrt-llm", "trtllm-cpp")


def test_ranges_are_half_open_and_unknown_is_latest():
    assert in_range((0, 9, 0), "0.9", None) and not in_range((0, 8, 5), "0.9", None)
    assert in_range((0, 8, 5), None, "0.9") and not in_range((0, 9), None, "0.9")
    assert in_range(None, "0.9", None) and not in_range(None, None, "0.9")


def test_defaults_carry_the_release_and_the_note():
    d = engine_defaults("vllm", H100.hbm_bytes, gpu_name=H100.name, version="main")
    assert d.release == "latest" and "vLLM" in d.version_note
    d = engine_defaults("vllm", H100.hbm_bytes, gpu_name=H100.name, version="v0.11.2")
    assert d.release == "0.11.2" and d.version_note is None


# --- defaults that differ between releases ----------------------------------------------------

def test_vllm_08_keys_the_large_budget_on_the_h100_h200_name():
    b200_08 = engine_defaults("vllm", B200.hbm_bytes, gpu_name=B200.name, version="0.8.5")
    b200_011 = engine_defaults("vllm", B200.hbm_bytes, gpu_name=B200.name, version="0.11.0")
    assert b200_08.max_num_batched_tokens == 2048 and b200_011.max_num_batched_tokens == 8192
    h100_08 = engine_defaults("vllm", H100.hbm_bytes, gpu_name="NVIDIA H100 80GB HBM3", version="0.8.5")
    assert h100_08.max_num_batched_tokens == 8192 and h100_08.max_num_seqs == 1024
    assert engine_defaults("vllm", L40S.hbm_bytes, gpu_name=L40S.name, version="0.8.0").max_num_seqs == 1024
    assert engine_defaults("vllm", L40S.hbm_bytes, gpu_name=L40S.name, version="0.9.0").max_num_seqs == 256


def test_vllm_latest_has_the_160_gib_tier():
    assert engine_defaults("vllm", B200.hbm_bytes, gpu_name=B200.name).max_num_batched_tokens == 16384
    assert engine_defaults("vllm", B200.hbm_bytes, gpu_name=B200.name, version="0.19.1").max_num_batched_tokens == 8192


def test_sglang_04_defaults():
    d = engine_defaults("sglang", H100.hbm_bytes, gpu_name=H100.name, tp=4, version="0.4.3")
    assert (d.max_num_batched_tokens, d.cuda_graph_max_batch, d.scheduler_policy) == (8192, 160, "lpm")
    assert d.gpu_memory_utilization == 0.85  # by TP alone in 0.4
    assert sglang_mem_fraction_static(H100.hbm_bytes, 8192, 160, tp=8, version="0.4.0") == 0.81
    latest = engine_defaults("sglang", B200.hbm_bytes, gpu_name=B200.name, tp=4)
    assert latest.max_num_batched_tokens == 16384 and latest.scheduler_policy == "fcfs"
    assert engine_defaults("sglang", B200.hbm_bytes, tp=4, version="0.4.6").max_num_batched_tokens == 8192


def test_trtllm_kv_block_by_backend():
    assert engine_defaults("tensorrt-llm", H100.hbm_bytes, version="0.13.0").block_size == 64
    assert engine_defaults("tensorrt-llm", H100.hbm_bytes, version="1.0").block_size == 32
    assert engine_defaults("tensorrt-llm", H100.hbm_bytes, version="trtllm-cpp").block_size == 64


def test_every_versioned_knob_has_a_catch_all_for_the_latest_release():
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        for name, entry in knobs(engine).items():
            items = entry.get("versions")
            if items:
                for backend in {i.get("backend") for i in items}:
                    assert any(i.get("before") is None and i.get("backend") == backend for i in items), \
                        f"{engine}.{name} ({backend}) has no entry for an unknown release"
