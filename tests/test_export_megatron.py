"""The Megatron-LM launch script runs: every flag is one Megatron defines, the arguments its
validation requires are there, and bash runs the script (with stub torchrun, srun and scontrol).

The flag list is every `add_argument('--...')` of NVIDIA/Megatron-LM
megatron/training/arguments.py at the commit named in tests/data/export/megatron_arguments_flags.txt.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.export import RunSettings, export_plan, megatron
from meshplan.training import TrainingPlan, resolve_plan
from tests.test_export import build

DATA = Path(__file__).parent / "data" / "export" / "megatron_arguments_flags.txt"
MEGATRON_ARGUMENTS = {line for line in DATA.read_text().splitlines() if line.startswith("--")}
TORCHRUN = {"--nproc_per_node", "--nnodes", "--node_rank", "--master_addr", "--master_port",
            "--rdzv_id", "--rdzv_backend", "--rdzv_endpoint"}
ENV = {"DATA_PATH": "/data/corpus_text_document", "TOKENIZER_MODEL": "meta-llama/Llama-3.1-8B",
       "CHECKPOINT_DIR": "/ckpt", "TRAIN_ITERS": "1000", "NODE_RANK": "0", "MASTER_ADDR": "node0"}


def command(text: str) -> tuple[list[str], list[str]]:
    """(launcher words, pretrain_gpt.py words) of the script's torchrun command."""
    start = text.index("torchrun \\")
    words = shlex.split(text[start:].replace("\\\n", " "))
    split = words.index("pretrain_gpt.py")
    return words[1:split], words[split + 1:]


def parsed(args: list[str]) -> dict[str, str | None]:
    """--flag -> its value (None for a store_true flag)."""
    out: dict[str, str | None] = {}
    for i, word in enumerate(args):
        if word.startswith("--"):
            following = args[i + 1] if i + 1 < len(args) else "--"
            out[word] = None if following.startswith("--") else following
    return out


def test_the_flag_list_names_its_source() -> None:
    head = DATA.read_text().splitlines()[:3]
    assert any("github.com/NVIDIA/Megatron-LM/blob/" in line for line in head)
    assert "--train-iters" in MEGATRON_ARGUMENTS and len(MEGATRON_ARGUMENTS) > 500


SCRIPTS = [("llama70b_3d", {}), ("llama8b_fsdp", {}), ("mixtral_ep", {}),
           ("llama70b_3d", dict(recompute="full", recompute_num_layers=2, precision="fp8",
                                offload_optimizer=True, rank_order="tp-cp-ep-pp-dp")),
           ("llama70b_3d", dict(vpp=None, pipeline_split=(18, 22, 22, 18)))]


@pytest.mark.parametrize("tokens", [None, 2e12])
@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
@pytest.mark.parametrize(("name", "overrides"), SCRIPTS)
def test_every_flag_is_megatrons_and_the_required_ones_are_set(name, overrides, launcher, tokens):
    run = RunSettings(train_tokens=tokens, launcher=launcher)
    launch, args = command(megatron.export(*build(name, **overrides), run))
    flags = [w for w in args if w.startswith("--")]
    assert set(flags) <= MEGATRON_ARGUMENTS, set(flags) - MEGATRON_ARGUMENTS
    assert len(flags) == len(set(flags)), "a flag is repeated"
    assert {w for w in launch if w.startswith("--")} <= TORCHRUN
    check_required(parsed(args))


def check_required(flags: dict) -> None:
    """The rules of Megatron's validate_args and training.py that a launch must meet."""
    assert ("--train-iters" in flags) != ("--train-samples" in flags)  # training.py raises otherwise
    if "--train-samples" in flags:  # sample-based: no iteration-based decay or warmup
        assert "--lr-decay-iters" not in flags and "--lr-warmup-iters" not in flags
    else:
        assert "--lr-decay-samples" not in flags and "--lr-warmup-samples" not in flags
    assert not ("--lr-warmup-fraction" in flags and ({"--lr-warmup-iters", "--lr-warmup-samples"} & set(flags)))
    assert float(flags["--min-lr"]) <= float(flags["--lr"])
    assert "--save" not in flags or int(flags["--save-interval"]) > 0
    assert int(flags["--max-position-embeddings"]) >= int(flags["--seq-length"])
    assert "--data-path" in flags or "--mock-data" in flags
    assert flags["--tokenizer-type"] == "HuggingFaceTokenizer" and "--tokenizer-model" in flags


def test_train_tokens_set_the_sample_count() -> None:
    model, cluster, plan = build("llama70b_3d")  # 64 x 8192 tokens a step
    text = megatron.export(model, cluster, plan, RunSettings(train_tokens=1e9))
    steps = -(-1e9 // (64 * 8192))
    assert f"--train-samples {int(steps) * 64} " in text and "TRAIN_ITERS" not in text
    assert f"--save-interval {min(1000, int(steps))}" in text


def _stub_bin(tmp_path: Path) -> Path:
    """torchrun, srun and scontrol stubs that print what they were given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stubs = {"torchrun": 'printf "%s\\n" torchrun "$@"', "srun": '"$@"',
             "scontrol": "echo node0"}
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def _run(tmp_path: Path, text: str, env: dict) -> subprocess.CompletedProcess:
    script = tmp_path / "launch.sh"
    script.write_text(text)
    path = f"{_stub_bin(tmp_path)}:{os.environ['PATH']}"
    return subprocess.run(["bash", str(script)], env={"PATH": path, **env},
                          capture_output=True, text=True, timeout=30)


def test_bash_runs_the_script_and_torchrun_gets_every_argument(tmp_path) -> None:
    mla = load_model("deepseek-v3")
    cluster = Cluster.build("h100-sxm-80gb", 64)
    plan = resolve_plan(TrainingPlan(tp=8, ep=8, pipeline_split=None, seq_len=4096), mla, cluster)
    text = megatron.export(mla, cluster, plan)
    missing = _run(tmp_path, text, {k: v for k, v in ENV.items() if k != "DATA_PATH"})
    assert missing.returncode != 0 and "set DATA_PATH to" in missing.stderr
    done = _run(tmp_path, text, ENV)
    assert done.returncode == 0, done.stderr
    words = done.stdout.splitlines()
    args = parsed(words[words.index("pretrain_gpt.py") + 1:])
    assert args["--moe-layer-freq"] == "([0]*3+[1]*58)"
    assert args["--data-path"] == ENV["DATA_PATH"] and args["--train-iters"] == "1000"


def test_every_placeholder_is_checked_whatever_its_text_holds(tmp_path) -> None:
    """A placeholder's text is quoted: an apostrophe in one ("the run's steps") once opened a
    quote that swallowed the next lines, so NODE_RANK went unchecked."""
    model, cluster, plan = build("llama70b_3d")
    text = megatron.export(model, cluster, plan)  # no --train-tokens: TRAIN_ITERS is a placeholder
    for missing in ("TRAIN_ITERS", "NODE_RANK", "MASTER_ADDR"):
        env = {k: v for k, v in ENV.items() if k != missing} | {"NODE_RANK": "0", "MASTER_ADDR": "n0"}
        env.pop(missing, None)
        done = _run(tmp_path, text, env)
        assert done.returncode != 0 and f"set {missing} to" in done.stderr, done.stderr


def test_the_slurm_variant_sruns_torchrun_once_per_node(tmp_path) -> None:
    model, cluster, plan = build("llama70b_3d")
    text = megatron.export(model, cluster, plan, RunSettings(launcher="slurm", train_tokens=1e12))
    assert "#SBATCH --nodes=8\n" in text and "#SBATCH --gpus-per-node=8\n" in text
    env = {k: ENV[k] for k in ("DATA_PATH", "TOKENIZER_MODEL", "CHECKPOINT_DIR")}
    env |= {"SLURM_JOB_NODELIST": "node[0-7]", "SLURM_NNODES": "8", "SLURM_JOB_ID": "42"}
    done = _run(tmp_path, text, env)
    assert done.returncode == 0, done.stderr
    words = done.stdout.splitlines()
    assert words[words.index("--rdzv_endpoint") + 1] == "node0:6000"
    assert "NODE_RANK" not in text


def test_model_names_cannot_break_out_of_the_script() -> None:
    model, cluster, plan = build("llama8b_fsdp")
    odd = dataclasses.replace(model, name="x\nrm -rf /; $(id)")
    text = megatron.export(odd, cluster, plan, RunSettings(launcher="slurm"))
    assert "\nrm -rf" not in text and "#SBATCH --job-name=megatron-x-rm--rf------id-\n" in text


runner = CliRunner()


def test_search_train_tokens_reach_the_export(tmp_path) -> None:
    search = runner.invoke(app, ["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
                                 "--num-gpus", "8", "--seq-len", "4096", "--global-batch-size", "32",
                                 "--train-tokens", "1e9", "--top", "1", "--json"])
    data = json.loads(search.stdout)
    assert data["plans"][0]["run"] == {"train_tokens": 1e9}
    path = tmp_path / "plans.json"
    path.write_text(search.stdout)
    result = runner.invoke(app, ["train", "export", "--target", "megatron", "--plan", str(path),
                                 "--launcher", "slurm"])
    assert result.exit_code == 0, result.output
    assert f"--train-samples {-(-int(1e9) // (32 * 4096)) * 32}" in result.stdout
    assert "#SBATCH --nodes=1" in result.stdout
    bad = runner.invoke(app, ["train", "export", "--target", "megatron", "--plan", str(path),
                              "--launcher", "mpirun"])
    assert bad.exit_code == 2 and "--launcher 'mpirun': use torchrun or slurm" in bad.stderr
