"""Command-line options shared by commands that take hardware (`--gpu`, `--num-gpus`, ...)."""

from __future__ import annotations

import typer

from meshplan.hardware import Cluster

GPU = typer.Option(..., "--gpu", help="GPU catalog name, e.g. h100-sxm-80gb (see `meshplan gpus list`).")
NUM_GPUS = typer.Option(..., "--num-gpus", help="GPUs in the job.")
GPUS_PER_NODE = typer.Option(None, "--gpus-per-node", help="GPUs per node (default: the GPU's usual server).")
SCALE_UP_DOMAIN = typer.Option(
    None, "--scale-up-domain", help="GPUs sharing NVLink/NVSwitch (default: the node; 72 for NVL72 parts).")
INTER_NODE_GBPS = typer.Option(
    None, "--inter-node-gbps-per-gpu", help="Scale-out bandwidth per GPU in Gb/s (default: the GPU's NIC).")
POWER_LIMIT = typer.Option(None, "--gpu-power-limit-w", help="GPU power cap in watts (default: TDP).")
HOST_MEMORY = typer.Option(None, "--host-memory-gb",
                           help="Host DRAM per node in GB (default: the GPU's reference server, hosts.yaml).")
HOST_LINK = typer.Option(None, "--host-link-gb-per-s",
                         help="Host<->GPU link per GPU, one direction, in GB/s (default: PCIe/C2C of the server).")
NVME_READ = typer.Option(None, "--nvme-read-gb-per-s", help="NVMe read bandwidth per node in GB/s.")
NVME_WRITE = typer.Option(None, "--nvme-write-gb-per-s", help="NVMe write bandwidth per node in GB/s.")
NVME_TB = typer.Option(None, "--nvme-tb", help="NVMe data capacity per node in TB.")
MEMORY_HEADROOM = typer.Option(
    None, "--memory-headroom", help="GPU memory in GiB a plan must leave free, a safety margin "
    "(a plan fits when its peak is at most the GPU's memory minus this; default 0).")
HOST_OPTIONS = ("host_memory_gb", "host_link_gb_per_s", "nvme_read_gb_per_s", "nvme_write_gb_per_s",
                "nvme_tb")
"""Keyword names of the host overrides, as `build_cluster` and `Cluster.build` take them."""


def build_cluster(gpu: str, num_gpus: int, gpus_per_node: int | None, scale_up_domain: int | None,
                  inter_node_gbps_per_gpu: float | None, gpu_power_limit_w: float | None,
                  memory_headroom: float | None = None, **host: float | None) -> Cluster:
    """A Cluster from the shared hardware options (`host`: the HOST_OPTIONS overrides;
    `memory_headroom`: --memory-headroom in GiB)."""
    return Cluster.build(gpu, num_gpus, gpus_per_node=gpus_per_node, scale_up_domain=scale_up_domain,
                         inter_node_gbps_per_gpu=inter_node_gbps_per_gpu,
                         gpu_power_limit_w=gpu_power_limit_w, memory_headroom_gib=memory_headroom,
                         **host)
