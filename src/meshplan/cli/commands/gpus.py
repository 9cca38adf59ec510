"""`meshplan gpus list` and `meshplan gpu show`: the GPU catalog, in human units."""

from __future__ import annotations

import typer
from rich import box
from rich.table import Table

from meshplan.cli.common import console, print_json, user_errors
from meshplan.cli.lazy import new_app
from meshplan.hardware import GPUSpec, get_gpu, list_gpus

gpus_app = new_app(help="The GPU catalog.", no_args_is_help=True)
gpu_app = new_app(help="One GPU's catalog row.", no_args_is_help=True)

GIB = 2**30
LIST_COLUMNS = (
    "name", "arch", "HBM\nGiB", "HBM\nTB/s", "bf16\nTFLOP/s", "fp8\nTFLOP/s",
    "scale-up\nGB/s/dir", "TDP\nW",
)


def _flops(gpu: GPUSpec, dtype: str) -> str:
    """Dense peak in TFLOP/s, or `-` when the part has none for `dtype`."""
    value = gpu.peak_flops_per_s.get(dtype)
    return "-" if value is None else f"{value / 1e12:.0f}"


def list_row(gpu: GPUSpec) -> list[str]:
    """One `gpus list` table row in human units."""
    return [
        gpu.name,
        gpu.architecture,
        f"{gpu.hbm_bytes / GIB:.1f}",
        f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f}",
        _flops(gpu, "bf16"),
        _flops(gpu, "fp8"),
        f"{gpu.scale_up_bandwidth_bytes_per_s_per_direction / 1e9:.0f}",
        f"{gpu.tdp_w:.0f}",
    ]


@gpus_app.command("list")
@user_errors
def list_command(json_out: bool = typer.Option(False, "--json", help="Print JSON (SI units).")) -> None:
    """List the catalog's GPUs: memory, dense peaks, scale-up bandwidth and power."""
    gpus = list_gpus()
    if json_out:
        print_json([gpu.to_dict() for gpu in gpus])
        return
    table = Table(title="meshplan GPU catalog (dense peaks)", box=box.SIMPLE_HEAD,
                  padding=(0, 1, 0, 0), pad_edge=False)
    for col in LIST_COLUMNS:
        table.add_column(col, justify="left" if col in ("name", "arch") else "right", no_wrap=True)
    for gpu in gpus:
        table.add_row(*list_row(gpu))
    console.print(table)


@gpu_app.command("show")
@user_errors
def show_command(
    name: str = typer.Argument(..., help="Catalog name, e.g. h100-sxm-80gb (see `meshplan gpus list`)."),
    json_out: bool = typer.Option(False, "--json", help="Print every field as JSON (SI units)."),
) -> None:
    """Every catalog field of one GPU, with its source."""
    gpu = get_gpu(name)
    if json_out:
        print_json(gpu.to_dict())
        return
    console.print(detail_table(gpu))


def detail_table(gpu: GPUSpec) -> Table:
    """A two-column table of one GPU in human units."""
    table = Table(title=f"{gpu.name} ({gpu.vendor} {gpu.architecture}, {gpu.form_factor})",
                  show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for dtype in gpu.dtypes:
        table.add_row(f"{dtype} dense peak", f"{gpu.peak_flops(dtype) / 1e12:,.1f} TFLOP/s")
    table.add_row("memory", f"{gpu.hbm_bytes / GIB:.1f} GiB ({gpu.hbm_bytes:,} B)")
    table.add_row("memory bandwidth", f"{gpu.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s")
    table.add_row("SMs / CUs", str(gpu.sm_count))
    clock = "-" if gpu.boost_clock_hz is None else f"{gpu.boost_clock_hz / 1e6:,.0f} MHz"
    table.add_row("boost clock", clock)
    table.add_row("TDP", f"{gpu.tdp_w:,.0f} W")
    table.add_row("scale-up", f"{gpu.scale_up_link}, "
                  f"{gpu.scale_up_bandwidth_bytes_per_s_per_direction / 1e9:,.0f} GB/s per direction")
    domain = gpu.default_scale_up_domain or "node"
    table.add_row("default node / domain", f"{gpu.default_gpus_per_node} GPUs / {domain}")
    table.add_row("NIC per GPU", f"{gpu.nic_bandwidth_bytes_per_s_per_direction * 8 / 1e9:,.0f} Gb/s")
    table.add_row("source", f"{gpu.source.document}\n{gpu.source.url}")
    if gpu.notes:
        table.add_row("notes", gpu.notes)
    return table


def register(app: typer.Typer) -> None:
    """Add the `gpus` and `gpu` command groups."""
    app.add_typer(gpus_app, name="gpus")
    app.add_typer(gpu_app, name="gpu")
