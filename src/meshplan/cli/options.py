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


def build_cluster(gpu: str, num_gpus: int, gpus_per_node: int | None, scale_up_domain: int | None,
                  inter_node_gbps_per_gpu: float | None, gpu_power_limit_w: float | None) -> Cluster:
    """A Cluster from the shared hardware options."""
    return Cluster.build(gpu, num_gpus, gpus_per_node=gpus_per_node, scale_up_domain=scale_up_domain,
                         inter_node_gbps_per_gpu=inter_node_gbps_per_gpu,
                         gpu_power_limit_w=gpu_power_limit_w)
