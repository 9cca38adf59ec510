"""Site profiles: a few multipliers fitted on a user's own measured runs, applied on top of the
packaged model.

A profile is a small YAML file (`meshplan calibrate --site NAME FILES...` writes it to the user's
config directory, `$MESHPLAN_CONFIG_DIR` or `$XDG_CONFIG_HOME/meshplan` or `~/.config/meshplan`,
under `sites/NAME.yaml`; `--out FILE` for an explicit path). It never touches the installed
package. Its constants, each a multiplier on a predicted time (1 = the packaged model):

- training.compute (per GPU model): every kernel's time (clocks, power caps, container kernels);
- training.intra_network / training.inter_network: collectives inside a node / across nodes;
- serving.device (per GPU model): an engine iteration's device time;
- serving.step: the engine's host time per step and per request.

`use_site(spec)` makes a profile active for the process (the CLI's `--site`, `MESHPLAN_SITE`,
the API's `site=`); the cost models read `active_site()` when they build their constants.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from meshplan.errors import ConfigError

PER_GPU = {"training": ("compute",), "serving": ("device",)}
"""Constants kept per GPU model (a dict of GPU name -> multiplier)."""
SHARED = {"training": ("intra_network", "inter_network"), "serving": ("step",)}
"""Constants shared by every GPU of the site."""
RENAMED: dict[str, str] = {"serving.host": "serving.step"}
"""Constants an older meshplan wrote under another name: old path -> current path."""
LIMITS = (0.25, 4.0)
"""A multiplier outside this range is not a site difference but a broken measurement."""


@dataclass(frozen=True, slots=True)
class SiteProfile:
    """A loaded profile: its name, where it came from, and its multipliers."""

    name: str
    path: str | None
    training: dict = field(default_factory=dict)
    serving: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """Messages from loading it (renamed constants)."""

    def factor(self, kind: str, name: str, gpu: str | None = None) -> float:
        """The multiplier `kind.name` (for `gpu` when kept per GPU model); 1 when absent."""
        value = getattr(self, kind).get(name, 1.0)
        if isinstance(value, dict):
            return float(value.get(gpu, 1.0))
        return float(value)

    def gpus(self, kind: str) -> set[str]:
        """GPU models the profile has per-GPU constants for."""
        return {g for name in PER_GPU[kind] for g in getattr(self, kind).get(name, {})}


_ACTIVE: SiteProfile | None = None


def active_site() -> SiteProfile | None:
    """The profile in use for this process, or None."""
    return _ACTIVE


def use_site(spec: str | Path | SiteProfile | None) -> SiteProfile | None:
    """Make a profile active (a name in the config directory, a file path, or a loaded
    profile); None (or an empty string) turns site profiles off. Returns the active profile."""
    global _ACTIVE
    _ACTIVE = spec if isinstance(spec, SiteProfile) or spec is None else (load_site(spec) if spec else None)
    return _ACTIVE


@contextmanager
def site_context(spec: str | Path | SiteProfile | None):
    """Use a profile inside a `with` block (the API's `site=`), restoring the previous one."""
    global _ACTIVE
    before = _ACTIVE
    try:
        yield use_site(spec) if spec is not None else before
    finally:
        _ACTIVE = before


def config_dir() -> Path:
    """Where profiles live: $MESHPLAN_CONFIG_DIR, else $XDG_CONFIG_HOME/meshplan, else
    ~/.config/meshplan."""
    if os.environ.get("MESHPLAN_CONFIG_DIR"):
        return Path(os.environ["MESHPLAN_CONFIG_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "meshplan"


def site_path(name: str) -> Path:
    """The file of profile `name` in the config directory."""
    return config_dir() / "sites" / f"{name}.yaml"


def load_site(spec: str | Path) -> SiteProfile:
    """A profile by name (config directory) or by file path."""
    path = Path(spec)
    if not path.suffix and not path.exists():
        path = site_path(str(spec))
    if not path.is_file():
        raise ConfigError(f"site profile {str(spec)!r}: no such profile ({path} does not exist); "
                          f"fit one with `meshplan calibrate --site NAME FILES...`")
    from meshplan.userfiles import parse_yaml, read_text

    data = parse_yaml(read_text(path, "site profile"), str(path))
    if not isinstance(data, dict) or not isinstance(data.get("constants"), dict):
        raise ConfigError(f"{path}: expected a site profile with a 'constants' mapping")
    kinds, notes = _read_constants(data["constants"], path)
    return SiteProfile(name=str(data.get("site") or path.stem), path=str(path), notes=tuple(notes), **kinds)


def _read_constants(constants: dict, path: Path) -> tuple[dict, list[str]]:
    """The training and serving multipliers of a profile, checked by name and range."""
    out: dict = {"training": {}, "serving": {}}
    notes = []
    for section, values in constants.items():
        if section not in out or not isinstance(values, dict):
            raise ConfigError(f"{path}: constants.{section}: expected training or serving")
        for key, value in values.items():
            kind, name = RENAMED.get(f"{section}.{key}", f"{section}.{key}").split(".")
            if (kind, name) != (section, key):
                notes.append(f"{path.name}: {section}.{key} is now called {kind}.{name}; read as such")
            valid = PER_GPU[kind] + SHARED[kind]
            if name not in valid:
                raise ConfigError(f"{path}: constants.{kind}.{name} is not a site constant; valid: "
                                  f"{', '.join(valid)}")
            out[kind][name] = _checked(value, f"{path}: constants.{kind}.{name}", name in PER_GPU[kind])
    return out, notes


def _checked(value, where: str, per_gpu: bool):
    """A multiplier (or a GPU -> multiplier mapping) within LIMITS."""
    if per_gpu:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping of GPU name to multiplier")
        return {str(g): _checked(v, f"{where}.{g}", False) for g, v in value.items()}
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not LIMITS[0] <= value <= LIMITS[1]:
        raise ConfigError(f"{where} = {value!r}: expected a multiplier in [{LIMITS[0]}, {LIMITS[1]}]")
    return float(value)


def save_site(document: dict, out: Path) -> Path:
    """Write a profile document (see meshplan.calibration.site_fit.profile_document) to `out`."""
    from meshplan.outfiles import write_atomic

    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "# meshplan site profile (meshplan calibrate --site); multipliers on predicted "
                 "times, 1 = the packaged model\n" + _dump(document), "site profile")
    return out


def _dump(document: dict) -> str:
    import yaml  # only when a profile is written: not on every start-up

    return yaml.safe_dump(document, sort_keys=False)
