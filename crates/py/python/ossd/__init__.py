"""ossd from Python: the object-based SSD stack's runs, experiments and object store images.

    import ossd
    ossd.presets()                                    # the device presets
    r = ossd.run({"device": "tiny", "workload.kind": "rand-write", "utilisation": 0.8})
    r["write_amplification"]                          # the report `ossd run --json` writes
    ossd.reproduce(scale=0.02, only=["001"])          # `ossd reproduce`, results.json as a list
    with ossd.ObjectStore("dev.img") as s:            # an image made by `ossd format`
        oid = s.put(b"hello"); s.get(oid); s.ls(); s.stat(oid); s.fsck()
    ossd.sweep("grid.toml")                           # a parameter sweep, on Ray if installed
    ossd.frame(r)                                     # a pandas DataFrame of any of these

Settings are the keys of `ossd run --set` (`ossd run --help` lists them), flat with dots
("fml.victim_policy") or nested ({"fml": {"victim_policy": "fifo"}}). Errors raise
`ossd.OssdError` with the Rust error's message. Runs release the GIL, so threads can run
simulations side by side.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any, Iterable, Optional, Union

from ._ossd import DEFAULT_PARTITION, ObjectStore, OssdError
from ._ossd import check_json as _check_json
from ._ossd import presets as _presets
from ._ossd import reproduce_json as _reproduce_json
from ._ossd import run_json as _run_json

__all__ = [
    "DEFAULT_PARTITION",
    "ObjectStore",
    "OssdError",
    "check",
    "frame",
    "presets",
    "reproduce",
    "run",
    "settings_to_sets",
    "sweep",
]

PathLike = Union[str, "os.PathLike[str]"]


def _value(key: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise OssdError(f"setting {key}: {v} is not a finite number")
        return repr(v)
    if isinstance(v, str):
        return v
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    raise OssdError(
        f"setting {key}: a {type(v).__name__} is not a setting value (str, int, float, bool)"
    )


def settings_to_sets(settings: Optional[Mapping[str, Any]]) -> list[str]:
    """The `KEY=VALUE` pairs `ossd run --set` would take for a settings dict (nested dicts
    become dotted keys)."""
    out: list[str] = []

    def walk(prefix: str, v: Any) -> None:
        if isinstance(v, Mapping):
            if not v:
                raise OssdError(f"setting {prefix or '(top)'}: an empty table")
            for k, x in v.items():
                if not isinstance(k, str) or not k:
                    raise OssdError(f"setting {prefix}: key {k!r} is not a non-empty str")
                walk(f"{prefix}.{k}" if prefix else k, x)
        else:
            out.append(f"{prefix}={_value(prefix, v)}")

    if settings is None:
        return out
    if not isinstance(settings, Mapping):
        raise OssdError(f"settings are a dict, not a {type(settings).__name__}")
    if settings:
        walk("", settings)
    return out


def run(
    settings: Optional[Mapping[str, Any]] = None,
    *,
    config: Optional[PathLike] = None,
) -> dict:
    """Runs one workload or trace and returns its report: the dict `ossd run --json` writes.

    `settings` holds `--set` keys; `config` a TOML file of the same keys (`--config`). The
    GIL is released during the run."""
    path = None if config is None else os.fspath(config)
    return json.loads(_run_json(settings_to_sets(settings), path))


def check(
    settings: Optional[Mapping[str, Any]] = None,
    *,
    config: Optional[PathLike] = None,
) -> dict:
    """Checks settings as `run` would, without running; returns the whole configuration."""
    path = None if config is None else os.fspath(config)
    return json.loads(_check_json(settings_to_sets(settings), path))


def presets() -> list[dict]:
    """The device presets, as `ossd presets` lists them (with each one's whole config)."""
    return _presets()


def reproduce(
    scale: float = 0.05,
    only: Union[str, Iterable[str], None] = None,
    *,
    jobs: int = 2,
    out: PathLike = "out/reproduce",
    experiments: PathLike = "experiments",
    progress: bool = False,
) -> list[dict]:
    """`ossd reproduce`: runs the papers' experiments (all, or those whose names start with
    one of `only`), writes the report (report.md, report.html, CSV, plots) into `out`, and
    returns results.json's content: one dict per experiment. The GIL is released meanwhile."""
    if isinstance(only, str):
        only = [only]
    if jobs < 1:
        raise OssdError(f"jobs must be at least 1, got {jobs}")
    text, _report = _reproduce_json(
        float(scale),
        list(only or []),
        int(jobs),
        os.fspath(out),
        os.fspath(experiments),
        bool(progress),
    )
    return json.loads(text)


def frame(results: Any):
    """A pandas DataFrame of a run report (one row), a list of run reports, a sweep (one row
    per point: its settings, status, error and report) or a reproduce report (one row per
    experiment, variant and phase). Also takes the path of such a JSON file."""
    from .frames import frame as _frame

    return _frame(results)


def sweep(
    grid: Union[PathLike, Mapping[str, Any]], out: Optional[PathLike] = None, **kwargs: Any
) -> dict:
    """Runs every point of a grid (a TOML file or a dict with `axes` and `fixed`) on Ray, or
    on local processes without Ray, into `out` (default out/sweep/NAME); see
    `ossd.sweeps.sweep` for the options (executor, ray_address, jobs, progress, plots)."""
    from .sweeps import sweep as _sweep

    return _sweep(grid, out, **kwargs)
