"""Render the "defaults by version" table of docs/serving/simulation.md from
src/meshplan/serving/data/engine_defaults.yaml (the block between `<!-- BEGIN TABLE:
engine_defaults -->` and its END marker; not a benchmarks/readme_blocks.py block: no benchmark
result feeds it). tests/test_engine_defaults_table.py fails when the page
and the YAML disagree. Run: python scripts/engine_defaults_table.py [--check]"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from meshplan.yamlread import load_packaged

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src/meshplan/serving/data/engine_defaults.yaml"
PAGE = ROOT / "docs/serving/simulation.md"
BLOCK = re.compile(r"(<!-- BEGIN TABLE: engine_defaults -->\n)(.*?)(<!-- END TABLE: engine_defaults -->)", re.S)
SHOWN = {"vllm": ("max_num_batched_tokens", "max_num_seqs", "chunked_prefill", "cuda_graph_max_batch",
                  "overlap_scheduling", "two_batch_overlap", "block_size", "gpu_memory_utilization"),
         "sglang": ("chunked_prefill_size", "max_running_requests", "chunked_prefill", "cuda_graph_max_bs",
                    "prefill_cuda_graph_max_tokens", "overlap_scheduling", "two_batch_overlap", "page_size", "mem_fraction_static",
                    "schedule_policy"),
         "tensorrt-llm": ("max_num_tokens", "max_batch_size", "chunked_prefill", "cuda_graph_max_batch",
                          "overlap_scheduling", "two_batch_overlap", "block_size", "gpu_memory_utilization")}
"""The knobs the issue asks for, in the engines' own spelling."""


def _when(when: dict) -> str:
    parts = []
    if "offline" in when:
        parts.append("offline" if when["offline"] else "server")
    for key, word in (("min_gib", ">= {} GiB"), ("max_gib", "< {} GiB"), ("min_tp", "tp >= {}"), ("max_tp", "tp < {}")):
        if key in when:
            parts.append(word.format(when[key]))
    if "name_includes" in when:
        parts.append("name has " + "/".join(when["name_includes"]))
    if "name_excludes" in when:
        parts.append("not " + "/".join(when["name_excludes"]))
    return ", ".join(parts)


def _plain(value) -> str:
    """A rule's value; SGLang's prefill-graph sizes and memory reserves are small mappings."""
    if not isinstance(value, dict):
        return str(value)
    if "reserve_gib" in value:
        per = value.get("per_tp_pp_gib")
        reserve = f"({value['reserve_gib']} + {per}*tp*pp)" if per else str(value["reserve_gib"])
        return f"(mem - {reserve} GiB) / mem"
    off = "/".join(value.get("off_with", ()))
    return f"{value['tokens']} (MLA: at most {value['mla_cap']})" + (f", off with {off}" if off else "")


def _value(entry: dict) -> str:
    if "value" in entry:
        return _plain(entry["value"])
    if "rules" in entry:
        return "; ".join(f"{_when(r['when'])}: {_plain(r['value'])}" if r.get("when") else f"else {_plain(r['value'])}"
                         for r in entry["rules"])
    return str(entry.get("formula", entry.get("default", "")))


def _releases(item: dict) -> str:
    since, before, backend = item.get("since"), item.get("before"), item.get("backend")
    span = (f"{since} to <{before}" if since and before else f">= {since}" if since
            else f"< {before}" if before else "all")
    return f"{backend}: {span}" if backend else span


def _source(item: dict) -> str:
    s = item.get("source", {})
    mark = "" if item.get("verified", True) else " (unverified)"
    at = str(s.get("version_or_commit", ""))
    at = at[:8] if re.fullmatch(r"[0-9a-f]{40}", at) else at
    return f"{s.get('repo', '')} `{s.get('path', '')}` @{at}{mark}"


def render() -> str:
    """The table, one row per knob and release range."""
    engines = load_packaged(DATA.read_text())["engines"]
    lines = ["| engine | knob | releases | default | source |", "|---|---|---|---|---|"]
    for engine, knobs in SHOWN.items():
        for name in knobs:
            entry = engines[engine]["knobs"][name]
            for item in entry.get("versions", [entry]):
                lines.append(f"| {engine} | `{name}` | {_releases(item)} | {_value(item).replace('|', '/')} "
                             f"| {_source(item)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    text = PAGE.read_text()
    new = BLOCK.sub(lambda m: m.group(1) + render() + m.group(3), text)
    if "--check" in sys.argv:
        return int(new != text)
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
