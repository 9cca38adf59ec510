"""`meshplan cluster show`: the hardware a run would use, resolved from the GPU catalog."""

from __future__ import annotations

import typer
from rich.table import Table

from meshplan.cli import options as opt
from meshplan.cli.common import console, print_json, user_errors
from meshplan.cli.lazy import new_app
from meshplan.cli.render import si

cluster_app = new_app(help="A cluster of catalog GPUs.", no_args_is_help=True)


@cluster_app.command("show")
@user_errors
def show(
    gpu: str = opt.GPU, num_gpus: int = opt.NUM_GPUS, gpus_per_node: int = opt.GPUS_PER_NODE,
    scale_up_domain: int = opt.SCALE_UP_DOMAIN, inter_node_gbps_per_gpu: float = opt.INTER_NODE_GBPS,
    gpu_power_limit_w: float = opt.POWER_LIMIT, host_memory_gb: float = opt.HOST_MEMORY,
    host_link_gb_per_s: float = opt.HOST_LINK, nvme_read_gb_per_s: float = opt.NVME_READ,
    nvme_write_gb_per_s: float = opt.NVME_WRITE, nvme_tb: float = opt.NVME_TB,
    json_out: bool = typer.Option(False, "--json", help="Print JSON (SI units)."),
) -> None:
    """Nodes, scale-up domains, bandwidths and aggregate capacity of a cluster."""
    cluster = opt.build_cluster(gpu, num_gpus, gpus_per_node, scale_up_domain,
                                inter_node_gbps_per_gpu, gpu_power_limit_w,
                                host_memory_gb=host_memory_gb, host_link_gb_per_s=host_link_gb_per_s,
                                nvme_read_gb_per_s=nvme_read_gb_per_s,
                                nvme_write_gb_per_s=nvme_write_gb_per_s, nvme_tb=nvme_tb)
    data = cluster.to_dict()
    if json_out:
        print_json(data)
        return
    table = Table(title=f"{data['num_gpus']} x {data['gpu']}", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("nodes x GPUs per node", f"{data['num_nodes']} x {data['gpus_per_node']}")
    table.add_row("scale-up domain", f"{data['scale_up_domain']} GPUs")
    table.add_row("scale-up per GPU (one direction)",
                  si(data["scale_up_bandwidth_bytes_per_s_per_direction"], "B/s"))
    table.add_row("scale-out per GPU (one direction)",
                  si(data["inter_node_bandwidth_bytes_per_s_per_gpu"], "B/s"))
    table.add_row("total memory", si(data["total_hbm_bytes"], "B", base=1024))
    for dtype, flops in data["total_peak_flops_per_s"].items():
        table.add_row(f"total {dtype} dense peak", si(flops, "FLOP/s"))
    table.add_row("host memory per node", si(data["host_memory_bytes_per_node"], "B"))
    table.add_row("host link per GPU (one direction)",
                  si(data["host_link_bandwidth_bytes_per_s_per_gpu"], "B/s"))
    table.add_row("NVMe per node (read / write)",
                  f"{si(data['nvme_read_bandwidth_bytes_per_s_per_node'], 'B/s')} / "
                  f"{si(data['nvme_write_bandwidth_bytes_per_s_per_node'], 'B/s')}")
    table.add_row("NVMe capacity per node", si(data["nvme_bytes_per_node"], "B"))
    if data["power_limit_w"]:
        table.add_row("power limit", f"{data['power_limit_w']:g} W")
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add the `cluster` command group."""
    app.add_typer(cluster_app, name="cluster")
