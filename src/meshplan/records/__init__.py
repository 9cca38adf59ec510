"""The run records meshplan ships: published training runs, serving benchmarks and hardware
micro-benchmarks, each record citing its source (format: SCHEMA.md beside this file).

- `training-calibration.yaml`, `serving-calibration.yaml`: the calibration sets that the fitted
  constants are fitted on and `meshplan validate` checks by default.
- `held-out/`: published runs the fit never reads, kept to measure accuracy out of sample.
- `hardware-microbench.yaml`: measured GEMM, collective, point-to-point and HBM rates.

These files are the only copy: a record that contradicts its source is fixed here.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA = HERE / "SCHEMA.md"
CALIBRATION = {"training": HERE / "training-calibration.yaml",
               "serving": HERE / "serving-calibration.yaml"}
"""The calibration record files by kind."""
MICROBENCH = HERE / "hardware-microbench.yaml"
HELD_OUT = HERE / "held-out"

SETS = {
    "builtin": (CALIBRATION["training"], CALIBRATION["serving"]),
    "training": (CALIBRATION["training"],),
    "serving": (CALIBRATION["serving"],),
    "held-out": tuple(sorted(HELD_OUT.glob("*.yaml"))),
}
SETS["all"] = SETS["builtin"] + SETS["held-out"]
"""`meshplan validate --records NAME` -> the packaged files it reads ("builtin" is the calibration
set, training and serving); `--records held-out/FILE` reads one held-out file (record_set)."""


def with_set(files: list[Path] | None, name: str | None, default: str | None = None) -> list[Path]:
    """The files a command was given, then those of the set named by --records (or of `default`
    when neither is given)."""
    name = name or (None if files else default)
    return [*(files or ()), *(record_set(name) if name else ())]


def record_set(name: str) -> tuple[Path, ...]:
    """The packaged record files of set `name` (see SETS), or the one held-out file that
    `held-out/NAME` names (NAME with or without `.yaml`); an unknown name lists the valid ones."""
    from meshplan.errors import ConfigError

    if name.startswith("held-out/"):
        path = HELD_OUT / name.removeprefix("held-out/")
        path = path if path.suffix == ".yaml" else path.with_name(path.name + ".yaml")
        if path in SETS["held-out"]:
            return (path,)
    elif name in SETS:
        return SETS[name]
    files = ", ".join(f"held-out/{p.stem}" for p in SETS["held-out"])
    raise ConfigError(f"--records {name!r} is not a built-in record set; valid: "
                      f"{', '.join(SETS)}, or one held-out file: {files}")
