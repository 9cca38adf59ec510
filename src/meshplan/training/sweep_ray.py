"""The Ray backend of `train sweep` (the `ray` extra): a session on an existing cluster
(`--address`) or a local Ray with the given number of CPUs, and the remote task."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from meshplan.errors import ConfigError


class RemoteChunk:
    """The remote `sweep_chunk` with the few Ray calls the sweep needs."""

    def __init__(self, ray):
        from meshplan.training.sweep import sweep_chunk

        self._ray = ray
        self._fn = ray.remote(max_retries=0)(sweep_chunk)

    def remote(self, cells, *args):
        return self._fn.remote(cells, *args)

    def wait(self, refs, num_returns: int = 1):
        return self._ray.wait(refs, num_returns=num_returns)

    def get(self, ref):
        return self._ray.get(ref)


@contextlib.contextmanager
def ray_session(address: str | None, workers: int) -> Iterator[RemoteChunk]:
    """Connect to `address` (a running Ray cluster) or start a local Ray with `workers` CPUs;
    shut down on exit what this call started."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray: pip install 'meshplan[ray]'") from None
    started = not ray.is_initialized()
    if started:
        quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
        if address:
            ray.init(address=address, **quiet)
        else:
            ray.init(num_cpus=max(1, workers), include_dashboard=False, **quiet)
    try:
        yield RemoteChunk(ray)
    finally:
        if started:
            ray.shutdown()
