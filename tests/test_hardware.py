"""Hardware catalog and Cluster: every record GPU is known, SI units, data-sheet spot checks."""

from __future__ import annotations

import re

import pytest
import yaml

from meshplan.errors import ConfigError, UnknownNameError
from meshplan.hardware import (
    Cluster,
    GPUSpec,
    get_gpu,
    get_interconnect,
    list_gpus,
    list_interconnects,
)
from meshplan.hardware.catalog import _read_rows, parse_gpu_rows
from tests.conftest import RECORDS as RUN_RECORDS

MIB = 2**20
GIB = 2**30

GPUS = list_gpus()


def schema_gpu_names() -> list[str]:
    """The names in SCHEMA.md's "GPU names" section."""
    section = (RUN_RECORDS / "SCHEMA.md").read_text().split("## GPU names", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"`([a-z0-9][a-z0-9.-]*-\d+gb)`", section)
    assert len(names) >= 20, "could not parse SCHEMA.md's GPU names"
    return names


def record_hardware() -> list[tuple[str, dict]]:
    """(record id, hardware mapping) for every run record that names a catalog GPU."""
    out = []
    for path in sorted(RUN_RECORDS.rglob("*.yaml")):
        for record in yaml.safe_load(path.read_text()).get("records", []):
            hardware = record.get("hardware") or {}
            if "gpu" in hardware:
                out.append((record["id"], hardware))
    return out


# ----------------------------------------------------------------------------- coverage


@pytest.mark.parametrize("name", schema_gpu_names())
def test_every_schema_gpu_name_is_in_the_catalog(name: str) -> None:
    assert get_gpu(name).name == name


def test_every_record_hardware_builds_a_cluster() -> None:
    records = record_hardware()
    assert records
    for record_id, hardware in records:
        cluster = Cluster.build(**hardware)
        assert cluster.num_nodes >= 1, record_id


# ----------------------------------------------------------------------------- units


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_every_row_cites_a_source(gpu: GPUSpec) -> None:
    assert gpu.source.url.startswith("https://")
    assert len(gpu.source.document) > 10


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_values_are_si_and_plausible(gpu: GPUSpec) -> None:
    half = gpu.peak_flops_per_s.get("bf16") or gpu.peak_flops("fp16")
    assert 50e12 <= half <= 6e15
    assert all(1e11 <= v <= 3e16 for v in gpu.peak_flops_per_s.values())
    assert 0.5e12 <= gpu.hbm_bandwidth_bytes_per_s <= 1e13
    assert 16 * GIB <= gpu.hbm_bytes <= 400 * GIB
    assert 200 <= gpu.tdp_w <= 1500
    assert 1e9 <= gpu.scale_up_bandwidth_bytes_per_s_per_direction <= 2e12
    assert 1e9 <= gpu.nic_bandwidth_bytes_per_s_per_direction <= 2e11
    assert 50 <= gpu.sm_count <= 400
    assert gpu.boost_clock_hz is None or 1e9 <= gpu.boost_clock_hz <= 3e9


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
def test_low_precision_rates(gpu: GPUSpec) -> None:
    """fp8 is twice bf16 (dense tables of every vendor; L40S's sheet rounds to 2.02x)."""
    peaks = gpu.peak_flops_per_s
    if "bf16" in peaks and "fp16" in peaks:
        assert peaks["bf16"] == peaks["fp16"]
    if "bf16" in peaks and "fp8" in peaks:
        assert peaks["fp8"] / peaks["bf16"] == pytest.approx(2.0, rel=0.02)
    if "fp8" in peaks and "fp4" in peaks:
        assert peaks["fp4"] >= 2 * peaks["fp8"] * 0.99


# ----------------------------------------------------------------------------- data sheets


def test_h100_sxm_matches_hopper_whitepaper() -> None:
    """NVIDIA H100 architecture whitepaper Table 3 (dense) and H100 data sheet."""
    h100 = get_gpu("h100-sxm-80gb")
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.peak_flops("fp8") == pytest.approx(1978.9e12)
    assert h100.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h100.scale_up_bandwidth_bytes_per_s_per_direction == pytest.approx(450e9)
    assert h100.hbm_bytes == 81559 * MIB  # nvidia-smi "81559MiB"
    assert h100.tdp_w == 700


def test_a100_sxm_matches_a100_datasheet() -> None:
    """NVIDIA A100 data sheet: 312 TFLOPS bf16 dense (624 sparse), 2,039 GB/s for 80GB SXM."""
    a100 = get_gpu("a100-sxm-80gb")
    assert a100.peak_flops("bf16") == pytest.approx(312e12)
    assert a100.peak_flops("tf32") == pytest.approx(156e12)
    assert a100.hbm_bandwidth_bytes_per_s == pytest.approx(2039e9)
    assert get_gpu("a100-sxm-40gb").hbm_bandwidth_bytes_per_s == pytest.approx(1555e9)


def test_mi300x_matches_amd_datasheet() -> None:
    """AMD Instinct MI300X data sheet: 1307.4 TFLOPS bf16, 2614.9 fp8, 5.3 TB/s, 750 W."""
    mi300x = get_gpu("mi300x-192gb")
    assert mi300x.peak_flops("bf16") == pytest.approx(1307.4e12)
    assert mi300x.peak_flops("fp8") == pytest.approx(2614.9e12)
    assert mi300x.hbm_bandwidth_bytes_per_s == pytest.approx(5.3e12)
    assert mi300x.tdp_w == 750


def test_blackwell_matches_hgx_and_nvl72_tables() -> None:
    """HGX B200 table / 8 and GB200 NVL72 table / 72, sparse figures halved."""
    b200, gb200 = get_gpu("b200-180gb"), get_gpu("gb200-186gb")
    assert b200.peak_flops("bf16") == pytest.approx(2.25e15)
    assert b200.peak_flops("fp8") == pytest.approx(4.5e15)
    assert b200.peak_flops("fp4") == pytest.approx(9e15)
    assert b200.hbm_bandwidth_bytes_per_s == pytest.approx(8e12)
    assert gb200.peak_flops("bf16") == pytest.approx(2.5e15)
    assert gb200.default_scale_up_domain == 72
    assert get_gpu("gb300-288gb").peak_flops("fp4") == pytest.approx(15e15)


def test_reduced_nvlink_export_parts() -> None:
    """A800 and H800 keep their siblings' compute but have 400 GB/s (bidirectional) NVLink."""
    assert get_gpu("a800-sxm-80gb").scale_up_bandwidth_bytes_per_s_per_direction == 200e9
    assert get_gpu("h800-sxm-80gb").scale_up_bandwidth_bytes_per_s_per_direction == 200e9
    assert get_gpu("h800-sxm-80gb").peak_flops("bf16") == get_gpu("h100-sxm-80gb").peak_flops("bf16")


def test_mi250x_gcd_is_half_a_package() -> None:
    """AMD MI250X: 383 TFLOPS fp16 and 3.2768 TB/s per package; a GCD gets half."""
    gcd = get_gpu("mi250x-gcd-64gb")
    assert gcd.peak_flops("bf16") * 2 == pytest.approx(383e12)
    assert gcd.hbm_bandwidth_bytes_per_s * 2 == pytest.approx(3.2768e12)
    # FP32 GEMMs run on the matrix cores: 95.7 TF per package, as FP64 matrix (vector: 47.9).
    assert gcd.peak_flops("fp32") * 2 == pytest.approx(95.7e12)


def test_amd_matmul_ceilings_divide_by_the_catalog_peaks() -> None:
    """compute_constants' per-GPU mamf ceilings are measured TFLOPS over the catalog's peak, not
    over the table's rounded (MI300X/MI325X: 1300) or wrong (MI355X: MI350X's 2300) peak."""
    from meshplan.costs.constants import gpu_ceiling

    names = {"AMD MI300X": "mi300x-192gb", "AMD MI325X": "mi325x-256gb", "AMD MI355X": "mi355x-288gb"}
    records = yaml.safe_load((RUN_RECORDS / "hardware-microbench.yaml").read_text())["records"]
    checked = 0
    for record in records:
        name = names.get(record["hardware"]["accelerator"])
        if name and record["kind"] == "gemm_peak":
            gpu = get_gpu(name)
            measured = record["measured"]["tflops"] * 1e12 / gpu.peak_flops("bf16")
            assert gpu_ceiling(gpu, "gemm_efficiency") == pytest.approx(measured, abs=0.002), name
            checked += 1
    assert checked == 3


def test_peaks_match_microbench_theoretical_values() -> None:
    """The MAMF table in hardware-microbench.yaml quotes each part's dense bf16/fp8 peak."""
    accelerators = {
        "NVIDIA A100 SXM": "a100-sxm-80gb", "NVIDIA A100 PCIe": "a100-pcie-80gb",
        "NVIDIA H100 SXM": "h100-sxm-80gb", "NVIDIA H200 SXM": "h200-sxm-141gb",
        "NVIDIA GH200 SXM": "gh200-144gb", "NVIDIA B200 SXM": "b200-180gb",
        "NVIDIA B300 SXM": "b300-288gb", "NVIDIA GB200 SXM": "gb200-186gb",
        "AMD MI300X": "mi300x-192gb", "AMD MI325X": "mi325x-256gb",
    }  # AMD MI355X is left out: the table quotes the MI350X's 2.3 PF, not the MI355X's 2.5 PF
    records = yaml.safe_load((RUN_RECORDS / "hardware-microbench.yaml").read_text())["records"]
    checked = 0
    for record in records:
        name = accelerators.get(record["hardware"]["accelerator"])
        theoretical = record["measured"].get("theoretical_dense_tflops")
        if name and theoretical and record["kind"] == "gemm_peak":
            dtype = record["dtype"].lower().split()[0]  # "FP8 e4m3fn" -> fp8
            assert get_gpu(name).peak_flops(dtype) == pytest.approx(theoretical * 1e12, rel=0.01)
            checked += 1
    assert checked >= 10


# ----------------------------------------------------------------------------- lookups


def test_lookup_is_case_insensitive() -> None:
    assert get_gpu("  H100-SXM-80GB ") is get_gpu("h100-sxm-80gb")
    assert get_gpu("h100-sxm-80gb").peak_flops("BF16") == pytest.approx(989.4e12)


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        get_gpu("h100")
    assert "h100-sxm-80gb" in str(info.value)
    assert "h100-sxm-80gb" in info.value.close_matches


def test_missing_dtype_names_the_dtypes_the_part_has() -> None:
    with pytest.raises(ConfigError, match=r"'bf16'.*fp64, fp32, fp16"):
        get_gpu("v100-sxm2-32gb").peak_flops("bf16")
    with pytest.raises(ConfigError, match="fp4"):
        get_gpu("h100-sxm-80gb").peak_flops("fp4")


def test_gpuspec_is_frozen_and_hashable() -> None:
    gpu = get_gpu("b200-180gb")
    with pytest.raises(AttributeError):
        gpu.tdp_w = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        gpu.peak_flops_per_s["bf16"] = 1.0  # type: ignore[index]
    assert len({gpu, get_gpu("b200-180gb")}) == 1
    assert gpu.to_dict()["source"]["url"].startswith("https://")


def test_interconnect_presets() -> None:
    names = {link.name for link in list_interconnects()}
    for needed in ("nvlink3", "nvlink4", "nvlink5", "nvl72", "pcie4", "pcie5", "infiniband-hdr",
                   "infiniband-ndr", "infiniband-xdr", "roce-400g", "efa-p5", "xgmi"):
        assert needed in names
    assert get_interconnect("NVLink4").bandwidth_bytes_per_s_per_direction == 450e9
    assert get_interconnect("infiniband-ndr").bandwidth_bytes_per_s_per_direction == 50e9
    assert get_interconnect("efa-p5").bandwidth_bytes_per_s_per_direction == 3200e9 / 8 / 8
    assert get_interconnect("nvl72").max_domain_gpus == 72
    for link in list_interconnects():
        assert link.source.url.startswith("https://") and 0 < link.latency_s < 1e-4
    for gpu in GPUS:
        assert get_interconnect(gpu.scale_up_link).kind == "scale_up"
    with pytest.raises(UnknownNameError):
        get_interconnect("nvlink9")


# ----------------------------------------------------------------------------- bad rows


def _row(**changes: object) -> dict:
    row = dict(_read_rows("gpus.yaml", "gpus")[0])
    row.update(changes)
    return row


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"hbm_gb": 80}, "hbm_gb"),
        ({"tdp_w": -5}, "tdp_w"),
        ({"peak_flops_per_s": {"fp9": 1e12}}, "peak_flops_per_s.fp9"),
        ({"architecture": "kepler"}, "architecture"),
        ({"source": {"url": "not a url", "document": "x"}}, "source.url"),
        ({"default_scale_up_domain": 3}, "default_scale_up_domain"),
    ],
)
def test_bad_row_names_row_and_field(changes: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_gpu_rows([_row(**changes)])
    message = str(info.value)
    assert "'v100-sxm2-32gb'" in message and field in message


def test_missing_field_and_duplicate_rows_fail() -> None:
    row = _row()
    del row["tdp_w"]
    with pytest.raises(ConfigError, match="tdp_w"):
        parse_gpu_rows([row])
    with pytest.raises(ConfigError, match="more than once"):
        parse_gpu_rows([_row(), _row()])


# ----------------------------------------------------------------------------- Cluster


def test_cluster_defaults_come_from_the_gpu_row() -> None:
    c = Cluster.build("h100-sxm-80gb", 64)
    assert (c.gpus_per_node, c.scale_up_domain, c.num_nodes) == (8, 8, 8)
    assert c.inter_node_bandwidth_bytes_per_s_per_gpu == 50e9
    assert c.scale_up_bandwidth_bytes_per_s_per_direction == 450e9
    assert c.power_limit_w is None
    nvl72 = Cluster.build("gb200-186gb", 256)
    assert (nvl72.gpus_per_node, nvl72.scale_up_domain, nvl72.num_nodes) == (4, 72, 64)
    assert Cluster.build("h100-nvl-94gb", 8).scale_up_domain == 2
    assert Cluster(gpu=get_gpu("a100-sxm-80gb"), num_gpus=4).num_nodes == 1


def test_cluster_build_mirrors_record_keys() -> None:
    c = Cluster.build(gpu="h100-sxm-96gb", num_gpus=512, gpus_per_node=8,
                      inter_node_gbps_per_gpu=200, gpu_power_limit_w=500, scale_up_domain=8)
    assert c.inter_node_bandwidth_bytes_per_s_per_gpu == 25e9
    assert c.power_limit_w == 500
    assert Cluster.build("l40s-48gb", 8, 8, scale_up_domain=1).scale_up_domain == 1
    assert Cluster.build("h100-sxm-80gb", 32, scale_up_domain=16).scale_up_domain == 16


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu": "h100-sxm-80gb", "num_gpus": 0}, "num_gpus must be"),
        ({"gpu": "h100-sxm-80gb", "num_gpus": 12}, r"multiple of 8 \(e\.g\. 8 or 16\)"),
        ({"gpu": "h100-sxm-80gb", "num_gpus": 8, "gpus_per_node": 0}, "gpus_per_node must be"),
        ({"gpu": "h100-sxm-80gb", "num_gpus": 8, "scale_up_domain": 3}, r"\(1, 2, 4, 8\)"),
        ({"gpu": "gb200-186gb", "num_gpus": 64, "gpus_per_node": 16}, "gb200-186gb default"),
        ({"gpu": "h100-sxm-80gb", "num_gpus": 8, "gpu_power_limit_w": 800}, "TDP is 700 W"),
        ({"gpu": "h100-sxm-80gb", "num_gpus": 8, "gpu_power_limit_w": 0}, r"outside \(0, 700\]"),
        ({"gpu": "h100-sxm-80gb", "num_gpus": 8, "inter_node_gbps_per_gpu": 0}, "must be positive"),
    ],
)
def test_cluster_validation_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Cluster.build(**kwargs)


def test_cluster_unknown_gpu() -> None:
    with pytest.raises(UnknownNameError, match="closest"):
        Cluster.build("h100-sxm", 8)
