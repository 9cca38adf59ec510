"""Launch scripts quote every value: a hostile model name stays one literal argument (#34).

Each script is checked with `bash -n` and then run with its programs (vllm, python, torchrun)
replaced by shell functions that record their arguments, one per line NUL-separated: the
hostile name must come back as one word, and nothing in it may run (no marker file).
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from meshplan import Cluster, load_model
from meshplan.export import export_plan
from meshplan.export.serving import export_serving
from meshplan.export.serving._common import STOP_ALL
from meshplan.serving.plan import ServingPlan
from meshplan.training import TrainingPlan, resolve_plan

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")

HOSTILE = ["x$(touch {marker})", "x`touch {marker}`", "x; touch {marker}", "x' ; touch {marker}; '",
           'x" ; touch {marker}; "', "x\ntouch {marker}", "x\\\ntouch {marker}", "x && touch {marker} #"]
STUBS = ("record() {{ printf '%s\\0' \"$@\" > {log}/call.$BASHPID.$RANDOM; }}\n"
         "vllm() {{ record vllm \"$@\"; }}\npython() {{ record python \"$@\"; }}\n"
         "torchrun() {{ record torchrun \"$@\"; }}\nray() {{ record ray \"$@\"; }}\n")


PLACEHOLDERS = {"NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "DATA_PATH": "data", "TOKENIZER_MODEL": "tok",
                "CHECKPOINT_DIR": "ckpt", "TRAIN_ITERS": "10", "HF_ASSETS_PATH": "assets", "DATASET": "c4",
                "TRAIN_STEPS": "10"}
"""What a user sets before a launch script runs (the Megatron script stops while one is unset)."""


def run_stubbed(script: str, tmp_path: Path) -> list[list[str]]:
    """Run `script` with its programs stubbed; the argument lists they received."""
    check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr
    log = tmp_path / "calls"
    log.mkdir(parents=True)
    text = STUBS.format(log=log) + script.replace(STOP_ALL, "") + "\nwait\n"  # every stub has run
    done = subprocess.run(["bash", "-c", text], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", **PLACEHOLDERS})
    assert done.returncode == 0, done.stderr
    return [call.read_bytes().decode().split("\0")[:-1] for call in sorted(log.iterdir())]


@pytest.mark.parametrize("target", ["vllm", "sglang"])
@pytest.mark.parametrize("template", HOSTILE)
def test_serving_script_keeps_a_hostile_model_one_word(target: str, template: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    model = template.format(marker=marker)
    script = export_serving(target, model, ServingPlan(engine=target, tp=2, replicas=2))
    calls = run_stubbed(script, tmp_path)
    servers = [c for c in calls if c[0] == "vllm" or "sglang.launch_server" in c]
    assert len(servers) == 2
    for words in servers:
        assert model in words, words
    assert not marker.exists()


@pytest.mark.parametrize("template", HOSTILE)
def test_training_exports_keep_a_hostile_model_name_inert(template: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    name = template.format(marker=marker)
    model = dataclasses.replace(load_model("llama-3.1-8b"), name=name)
    cluster = Cluster.build("h100-sxm-80gb", 8)
    plan = resolve_plan(TrainingPlan(tp=2), model, cluster)
    calls = run_stubbed(export_plan("megatron", model, cluster, plan), tmp_path)
    assert [c[0] for c in calls] == ["torchrun"]
    assert not marker.exists()
    titan = resolve_plan(TrainingPlan(tp=2, framework="torchtitan"), model, cluster)
    calls = run_stubbed(export_plan("torchtitan", model, cluster, titan), tmp_path / "titan")
    assert [c[0] for c in calls] == ["torchrun"] and "--module" in calls[0]
    assert not marker.exists()
