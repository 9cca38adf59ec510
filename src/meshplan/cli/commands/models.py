"""`meshplan models list` and `meshplan model show`: what a model is, in numbers."""

from __future__ import annotations

import typer
from rich.table import Table

from meshplan.cli.common import console, print_json, user_errors
from meshplan.cli.lazy import new_app
from meshplan.cli.render import count, params, si
from meshplan.model import list_entries, load_model
from meshplan.model.summary import model_summary

models_app = new_app(help="The model catalog.", no_args_is_help=True)
model_app = new_app(help="One model's parameters, FLOPs and KV-cache size.", no_args_is_help=True)

MODEL_HELP = "Catalog name (e.g. llama-3.1-70b), path to a config.json, or hf:ORG/NAME."


@models_app.command("list")
@user_errors
def list_models(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the catalog's models with their parameter counts."""
    rows = []
    for entry in list_entries():
        spec = load_model(entry.name)
        rows.append({"name": entry.name, "family": spec.family, "params_total": spec.params_total,
                     "params_active": spec.params_active, "hf_repo": entry.hf_repo,
                     "description": entry.description})
    if json_out:
        print_json(rows)
        return
    table = Table(title="meshplan model catalog")
    for col in ("name", "family", "params", "active", "source repo"):
        table.add_column(col, justify="right" if col in ("params", "active") else "left")
    for r in rows:
        table.add_row(r["name"], r["family"], params(r["params_total"]), params(r["params_active"]),
                      r["hf_repo"] or "-")
    console.print(table)


@model_app.command("show")
@user_errors
def show(
    model: str = typer.Argument(..., help=MODEL_HELP),
    seq_len: int = typer.Option(4096, "--seq-len", min=1, help="Sequence length for FLOPs."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Parameters, FLOPs per token and KV-cache bytes of one model."""
    summary = model_summary(load_model(model), seq_len)
    if json_out:
        print_json(summary)
        return
    console.print(summary_table(summary))


def summary_table(s: dict) -> Table:
    """A two-column table of a model summary in human units."""
    table = Table(title=f"{s['name']} ({s['family']})", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("parameters", count(s["params_total"]))
    table.add_row("active per token", count(s["params_active"]))
    table.add_row("embedding", count(s["params_embedding"]))
    table.add_row("layers / hidden / vocab",
                  f"{s['num_layers']} / {s['hidden_size']} / {s['vocab_size']}")
    table.add_row("heads (q / kv) x dim",
                  f"{s['num_attention_heads']} / {s['num_key_value_heads']} x {s['head_dim']}")
    mix = ", ".join(f"{k} {v}" for k, v in s["layer_mix"].items() if v) or "dense, full attention"
    table.add_row("layer mix", mix)
    table.add_row(f"forward FLOPs/token @ {s['seq_len']} (causal)", si(s["flops_per_token_forward"], "FLOP"))
    table.add_row("KV cache per token (bf16)", si(s["kv_cache_bytes_per_token"], "B", base=1024))
    if s.get("checkpoint_weights"):
        table.add_row("weights as stored", stored_text(s["checkpoint_weights"]))
    for kind, n in s["params_by_kind"].items():
        if n:
            table.add_row(f"  {kind}", count(n))
    return table


def stored_text(w: dict) -> str:
    """`60.8 GiB: experts mxfp4 (4.25 bits), rest bf16`: the checkpoint's bytes and formats."""
    by_format: dict[str, list[str]] = {}
    for group, f in w["groups"].items():
        if f["bits_per_weight"] < 16:
            by_format.setdefault(f"{f['format']} ({f['bits_per_weight']:.3g} bits)", []).append(group)
    parts = [f"{'/'.join(groups)} {fmt}" for fmt, groups in by_format.items()] or [w["quant_method"]]
    return f"{si(w['bytes'], 'B', base=1024)}: " + ", ".join(parts) + ", rest bf16"


def register(app: typer.Typer) -> None:
    """Add the `models` and `model` command groups."""
    app.add_typer(models_app, name="models")
    app.add_typer(model_app, name="model")
