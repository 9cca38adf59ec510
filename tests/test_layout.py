"""The package layout shows the architecture (CONVENTIONS 15, DESIGN "Layers of the code"): no
folder holds more than MAX_MODULES modules, and no module imports one of a higher layer. Imports
are read with `ast`, function-local ones included, so a lazy import cannot hide an upward one."""

from __future__ import annotations

import ast
from pathlib import Path

import meshplan

ROOT = Path(meshplan.__file__).parent
MAX_MODULES = 15

LAYERS: dict[str, float] = {
    # 0: helpers every layer may use; the package root only loads its public names lazily
    "meshplan": 0, "meshplan.errors": 0, "meshplan.yamlread": 0, "meshplan.userfiles": 0,
    "meshplan.gcpause": 0, "meshplan.parallel": 0, "meshplan.memo": 0,
    "meshplan.calibration.site": 0, "meshplan.records": 0,
    # 1: specs and catalogs
    "meshplan.model": 1, "meshplan.hardware": 1, "meshplan.bands": 1,
    # 2: the costs both training and serving share
    "meshplan.costs": 2,
    # 3: one plan's parts; training's per-plan models may use one another, serving's are a chain
    "meshplan.training.plan": 3.0, "meshplan.training.pipeline": 3.0,
    "meshplan.training.imbalance": 3.0,
    "meshplan.training": 3.1, "meshplan.training.layout": 3.1, "meshplan.training.memory": 3.1,
    "meshplan.training.time": 3.1, "meshplan.training.finetune": 3.1,
    "meshplan.training.imbalance.report": 3.1,
    "meshplan.serving": 3.0, "meshplan.serving.plan": 3.0, "meshplan.serving.traffic": 3.0,
    "meshplan.serving.cost": 3.1, "meshplan.serving.engine": 3.2, "meshplan.serving.metrics": 3.3,
    # 4: one plan -> its answer
    "meshplan.training.estimate": 4, "meshplan.training.estimate_report": 4,
    "meshplan.training.choose": 4, "meshplan.training.would_fit": 4, "meshplan.serving.simulate": 4,
    "meshplan.goodput": 4,  # a training plan's step and memory states -> its run's wall clock
    # 5: the plan searches
    "meshplan.training.search": 5, "meshplan.serving.search": 5,
    # 6: what uses the predictions: launch configs, reports, validation, fitting, the Python API
    "meshplan.export": 6, "meshplan.report": 6, "meshplan.validate": 6, "meshplan.calibration": 6,
    "meshplan.api": 6,
    # 7: the front ends
    "meshplan.cli": 7, "meshplan.ui": 7, "meshplan.__main__": 7,
}
"""Module or package -> its layer (the longest matching name decides). A module may import its
own layer and those below, never one above."""

SEPARATE = ("meshplan.training", "meshplan.serving")
"""Concerns that share only the layers below them: neither imports the other."""


def layer(module: str) -> float:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return LAYERS[".".join(parts[:n])]
    raise AssertionError(f"{module} is in no layer of LAYERS: add it")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = ROOT.parent / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def public_names() -> dict[str, str]:
    """meshplan's lazily loaded public names -> their modules (`from meshplan import Cluster`)."""
    return {**getattr(meshplan, "_LAZY", {})}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported meshplan module) of every import in `path`, function-local ones too."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    lazy = public_names()
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                if base == "meshplan" and alias.name in lazy:
                    found.append((node.lineno, lazy[alias.name]))
                elif is_module(f"{base}.{alias.name}"):
                    found.append((node.lineno, f"{base}.{alias.name}"))
                else:
                    found.append((node.lineno, base))
    return [(line, name) for line, name in found if name.split(".")[0] == "meshplan"]


def concern(module: str) -> str | None:
    return next((c for c in SEPARATE if module == c or module.startswith(c + ".")), None)


def test_no_folder_holds_more_than_fifteen_modules():
    crowded = {}
    for folder in [ROOT, *(p for p in ROOT.rglob("*") if p.is_dir())]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > MAX_MODULES:
            crowded[str(folder.relative_to(ROOT.parent))] = len(modules)
    assert not crowded, f"folders with more than {MAX_MODULES} modules: {crowded}"


def test_no_module_imports_a_higher_layer():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        here = module_name(path)
        for line, target in imports(path):
            if layer(target) > layer(here):
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} {here} (layer "
                              f"{layer(here)}) imports {target} (layer {layer(target)})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_training_and_serving_do_not_import_each_other():
    crossing = []
    for path in sorted(ROOT.rglob("*.py")):
        here = module_name(path)
        mine = concern(here)
        for line, target in imports(path):
            theirs = concern(target)
            if mine and theirs and mine != theirs:
                crossing.append(f"{path.relative_to(ROOT.parent)}:{line} imports {target}")
    assert not crossing, "\n".join(crossing)


def test_only_the_front_ends_import_the_front_ends():
    front = ("meshplan.cli", "meshplan.ui", "meshplan.__main__")
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        here = module_name(path)
        if here.startswith(front):
            continue
        wrong += [f"{path.relative_to(ROOT.parent)}:{line} imports {target}"
                  for line, target in imports(path) if target.startswith(front)]
    assert not wrong, "\n".join(wrong)


def test_the_checks_see_what_they_check():
    """A sample of known edges, so a parser that finds nothing cannot pass the tests above."""
    search = ROOT / "training" / "search" / "grid.py"
    found = {name for _, name in imports(search)}
    assert "meshplan.training.search.plans" in found  # a function-local import
    assert "meshplan.hardware" in found  # `from meshplan import Cluster`, a lazy public name
    assert layer("meshplan.training.memory.total") < layer("meshplan.training.estimate")
    assert layer("meshplan.calibration.site") < layer("meshplan.calibration.training")
