"""Read an engine version string ("v1.1.0rc2", "0.5.4.post1", "TensorRT-LLM 1.0 (PyTorch)",
"trtllm-cpp 0.21", "main", none at all) into a release number and, for TensorRT-LLM, a backend.

A string with no release number in it resolves to the latest defaults `engine_defaults.yaml`
documents for that engine, and says so in `note`: callers print the note (CLI, on stderr) or
return it (library), so a guess is never silent. No version at all also means the latest
defaults (a record or user that states no knob ran the engine's current defaults), quietly.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from meshplan.yamlread import load_packaged

_NUMBER = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)*)(?![\d])")
_POST = re.compile(r"[.-]?post(\d+)")
"""A release number that does not sit inside a word (skips 'b6261862', 'H100', 'TensorRT 9.1'
is handled by taking the first number only)."""
_CPP = ("cpp", "c++", "tensorrt engine", "trt engine", "tensorrt backend", "backend tensorrt")
_PYTORCH = ("pytorch", "torch")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineVersion:
    """What a version string says about the release whose defaults apply."""

    release: tuple[int, ...] | None
    """Release number, pre-release and dev/post suffixes dropped (1.1.0rc2 -> (1, 1, 0)); None
    when the string has none (then the latest documented release applies)."""
    backend: str | None = None
    """TensorRT-LLM only: "pytorch" (the default from 1.0) or "cpp" (TensorRT engines run by the
    C++ executor, the 0.x path); None for the other engines."""
    text: str | None = None
    """The string as given."""
    note: str | None = None
    """One sentence for the user when the version could not be read, naming what was chosen."""
    post: int = 0
    """Post-release number ("0.4.6.post2" -> 2): SGLang changed defaults in post releases."""

    def label(self) -> str:
        """"1.1.0", "0.4.6.post2" or "latest" (for messages)."""
        if not self.release:
            return "latest"
        return ".".join(map(str, self.release)) + (f".post{self.post}" if self.post else "")


def parse_release(text: str | None) -> tuple[int, ...] | None:
    """The first release number in `text` ("v1.1.0rc2" -> (1, 1, 0)), or None."""
    if not text:
        return None
    m = _NUMBER.search(text.strip().lower())
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def parse_post(text: str | None) -> int:
    """The post-release number right after the release number in `text` ("0.5.4.post1" -> 1), or 0."""
    m = _NUMBER.search((text or "").strip().lower())
    post = _POST.match(text.strip().lower(), m.end()) if m else None
    return int(post.group(1)) if post else 0


def _backend(engine: str, text: str, release: tuple[int, ...] | None) -> str | None:
    if engine != "tensorrt-llm":
        return None
    low = text.lower()
    if any(k in low for k in _CPP):
        return "cpp"
    if any(k in low for k in _PYTORCH):
        return "pytorch"
    return "cpp" if release is not None and release[0] < 1 else "pytorch"


def parse_version(engine: str, text: str | None, latest: str) -> EngineVersion:
    """`text` read for `engine` (a canonical name); `latest` names the defaults used when it has
    no release number (e.g. "vLLM 0.11+"), for the note."""
    release = parse_release(text)
    backend = _backend(engine, text or "", release)
    note = None
    if backend == "cpp":
        latest = "TensorRT-LLM C++ runtime (TensorRT engines)"
    if release is None and text and text.strip():  # not stating a version means today's defaults
        note = f"engine version {text.strip()!r} names no release: using the latest documented {latest} defaults"
    return EngineVersion(release=release, backend=backend, text=text, note=note, post=parse_post(text))


def in_range(release: tuple[int, ...] | None, since: str | None, before: str | None, post: int = 0) -> bool:
    """Whether `release` (post release `post`) lies in [since, before); the bounds may name post
    releases ("0.4.6.post2"). An unknown release (None) is the latest, so it matches only
    open-ended ranges."""
    if release is None:
        return before is None
    here = (release, post)
    lo = (parse_release(since), parse_post(since)) if since else None
    hi = (parse_release(before), parse_post(before)) if before else None
    return (lo is None or _cmp(here, lo) >= 0) and (hi is None or _cmp(here, hi) < 0)


def _cmp(a: tuple[tuple[int, ...], int], b: tuple[tuple[int, ...], int]) -> int:
    """Order two (release, post) pairs; a missing trailing release part counts as 0."""
    n = max(len(a[0]), len(b[0]))
    a, b = (a[0] + (0,) * (n - len(a[0])), a[1]), (b[0] + (0,) * (n - len(b[0])), b[1])
    return (a > b) - (a < b)


@functools.cache
def _latest_labels() -> dict[str, str]:
    text = resources.files("meshplan.serving").joinpath("data").joinpath("engine_defaults.yaml").read_text()
    return {k: e["releases"]["latest"] for k, e in load_packaged(text)["engines"].items()}


def resolve_version(engine: str, text: str | None) -> EngineVersion:
    """`text` read for `engine` (its catalog name: vllm, sglang, tensorrt-llm); its note, when
    it has no release number, names the latest documented defaults (engine_defaults.yaml,
    `releases.latest`) used instead."""
    return parse_version(engine, text, _latest_labels().get(engine, engine))
