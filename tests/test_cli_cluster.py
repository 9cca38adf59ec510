"""`meshplan cluster show`: defaults from the GPU row, overrides, and impossible layouts."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from meshplan.cli.app import app

runner = CliRunner()


def show(*args: str):
    return runner.invoke(app, ["cluster", "show", *args])


def test_nvl72_parts_default_to_a_72_gpu_domain():
    result = show("--gpu", "gb200-186gb", "--num-gpus", "144", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["scale_up_domain"] == 72
    assert data["num_nodes"] * data["gpus_per_node"] == 144


def test_overrides_reach_the_cluster():
    result = show("--gpu", "h100-sxm-80gb", "--num-gpus", "64", "--gpus-per-node", "8",
                  "--inter-node-gbps-per-gpu", "200", "--gpu-power-limit-w", "500", "--json")
    data = json.loads(result.stdout)
    assert data["num_nodes"] == 8
    assert data["inter_node_bandwidth_bytes_per_s_per_gpu"] == 25e9  # 200 Gb/s = 25 GB/s
    assert data["power_limit_w"] == 500
    assert data["total_peak_flops_per_s"]["bf16"] == 64 * 989.4e12  # H100 SXM data sheet, dense


def test_partial_nodes_are_an_error_naming_valid_counts():
    result = show("--gpu", "h100-sxm-80gb", "--num-gpus", "12")
    assert result.exit_code == 2
    assert "use a multiple of 8 (e.g. 8 or 16)" in result.stderr


def test_table_renders():
    result = show("--gpu", "mi300x-192gb", "--num-gpus", "16")
    assert result.exit_code == 0, result.output
    assert "2 x 8" in result.stdout
