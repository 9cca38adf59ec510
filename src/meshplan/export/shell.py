"""Shell text for launch scripts.

Every value a launch script receives comes from the user (a CLI flag, a model file, a web form)
and may hold `$(...)`, backticks, `;`, quotes or a newline: written into a script it stays one
literal argument (`word`), and written into a `# ...` comment it cannot end the comment
(`comment_text`). On top of that, the training exporters' bash launch script around one torchrun
command (`Script`, `torchrun`, `slurm`): the header, the placeholders a user must set
(`VAR=${VAR:?what to set}` stops the script while one is missing) and the launcher.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from meshplan.hardware import Cluster

class Raw(str):
    """Shell text written as is (already quoted or meant to expand)."""


def word(value: object) -> str:
    """`value` as one shell word (a Raw value as is; a float in %g form)."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, float):
        return shlex.quote(f"{value:g}")
    return shlex.quote(str(value))


def comment_text(text: object) -> str:
    """`text` safe inside a `# ...` comment line: control characters (a newline would end the
    comment and start a command) written as escapes."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in str(text))


MASTER_PORT = 6000
PLACEHOLDER = re.compile(r"^\$[A-Z_][A-Z0-9_]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Script:
    """One engine launch: `program` run by torchrun on every GPU with `args`."""

    title: str
    notes: list[str]
    """Header comment lines after the title (target version, how to run)."""
    placeholders: list[tuple[str, str]]
    """(VARIABLE, what to set it to): the script refuses to start while one is unset."""
    program: str
    args: list[tuple[str, object]]
    """(flag, value) pairs; value None for a store_true flag."""
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Files the script writes before launching (name -> text, written verbatim by a quoted
    here-document, so nothing in them expands); the launch directory joins PYTHONPATH."""


def comment(text: str) -> str:
    """`text` as one line of a comment."""
    return "# " + comment_text(text)


def shell_word(value: object) -> str:
    """`value` as one shell word: a placeholder reference stays expandable, Raw text is written as
    is, the rest is quoted."""
    if isinstance(value, Raw):
        return str(value)
    text = str(value)
    return word(Raw(f'"{text}"') if PLACEHOLDER.match(text) else text)


def _arg_lines(args: list[tuple[str, object]]) -> list[str]:
    return [name if value is None else f"{name} {shell_word(value)}" for name, value in args]


def _continued(lines: list[str]) -> list[str]:
    return [lines[0] + " \\"] + [f"  {line} \\" for line in lines[1:-1]] + [f"  {lines[-1]}"]


def _placeholders(script: Script, extra: list[tuple[str, str]]) -> list[str]:
    out = ["# ---- set these before launching; the script stops while one is unset ----"]
    for name, what in script.placeholders + extra:
        text = re.sub(r'([\\"$`])', r"\\\1", comment_text(f"set {name} to {what}"))
        out.append(f'{name}=${{{name}:?"{text}"}}')
    return out


def _env(script: Script) -> list[str]:
    out = [f"export {k}={shell_word(v)}" for k, v in script.env.items()]
    for name, text in script.files.items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or "MESHPLAN_EOF" in text.splitlines():
            raise ValueError(f"file {name!r} cannot be written by a here-document")
        out += [f"cat > {name} <<'MESHPLAN_EOF'", text.rstrip("\n"), "MESHPLAN_EOF"]
    if script.files:
        out.append('export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"')
    return out


def torchrun(script: Script, cluster: Cluster) -> str:
    """Run on every node with NODE_RANK and MASTER_ADDR set."""
    per_node = min(cluster.gpus_per_node, cluster.num_gpus)
    extra = [("NODE_RANK", f"this node's index, 0 to {cluster.num_nodes - 1}"),
             ("MASTER_ADDR", "the address of node 0")]
    launch = ["torchrun", f"--nproc_per_node {per_node}", f"--nnodes {cluster.num_nodes}",
              '--node_rank "$NODE_RANK"', '--master_addr "$MASTER_ADDR"',
              f"--master_port {MASTER_PORT}", script.program]
    head = ["#!/bin/bash", comment(script.title)] + [comment(n) for n in script.notes]
    head.append(comment("torchrun launcher: run this script on every node, with NODE_RANK and MASTER_ADDR"))
    body = _placeholders(script, extra) + _env(script)
    return "\n".join(head + ["set -euo pipefail", ""] + body + [""]
                     + _continued(launch + _arg_lines(script.args))) + "\n"


def slurm(script: Script, cluster: Cluster, job_name: str) -> str:
    """An sbatch script: one srun task per node, each a torchrun with c10d rendezvous."""
    per_node = min(cluster.gpus_per_node, cluster.num_gpus)
    name = re.sub(r"[^A-Za-z0-9._-]", "-", job_name)
    sbatch = [f"#SBATCH --job-name={name}", f"#SBATCH --nodes={cluster.num_nodes}",
              "#SBATCH --ntasks-per-node=1", f"#SBATCH --gpus-per-node={per_node}",
              "#SBATCH --exclusive"]
    head = ["#!/bin/bash"] + sbatch + [comment(script.title)] + [comment(n) for n in script.notes]
    head.append(comment("Slurm launcher: submit with sbatch (add --partition/--account/--time)"))
    master = 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    launch = ["srun torchrun", f"--nproc_per_node {per_node}", '--nnodes "$SLURM_NNODES"',
              '--rdzv_id "$SLURM_JOB_ID"', "--rdzv_backend c10d",
              f'--rdzv_endpoint "$MASTER_ADDR:{MASTER_PORT}"', script.program]
    body = _placeholders(script, []) + [master] + _env(script)
    return "\n".join(head + ["set -euo pipefail", ""] + body + [""]
                     + _continued(launch + _arg_lines(script.args))) + "\n"
