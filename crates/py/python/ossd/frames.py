"""`ossd.frame`: pandas DataFrames of run reports, sweeps and reproduce reports."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ._ossd import OssdError


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts become dotted columns; lists stay values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _is_run_report(d: Any) -> bool:
    return isinstance(d, Mapping) and "write_amplification" in d and "stack" in d


def _is_experiment(d: Any) -> bool:
    return isinstance(d, Mapping) and "variants" in d and "verdicts" in d


def _is_sweep(d: Any) -> bool:
    return isinstance(d, Mapping) and "points" in d and isinstance(d["points"], list)


def _is_point(d: Any) -> bool:
    return isinstance(d, Mapping) and "settings" in d and "status" in d


def point_row(p: Mapping[str, Any]) -> dict[str, Any]:
    """One sweep point as a flat row: key, status, error, its settings (as given, dotted),
    then its report's figures (a figure named like a setting gets a `report.` prefix)."""
    row: dict[str, Any] = {"key": p.get("key"), "status": p["status"], "error": p.get("error")}
    settings = p.get("settings") or {}
    row.update(settings)
    report = p.get("report")
    if isinstance(report, Mapping):
        for k, v in _flatten(report).items():
            row[f"report.{k}" if k in settings or k in ("key", "status", "error") else k] = v
    if "point_wall_seconds" in p:
        row["point_wall_seconds"] = p["point_wall_seconds"]
    return row


def _experiment_rows(e: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = []
    head = {k: e.get(k) for k in ("name", "title", "source", "device", "scale")}
    head = {f"experiment.{k}" if k != "name" else "experiment": v for k, v in head.items()}
    for v in e["variants"]:
        base = dict(head)
        base["variant"] = v.get("label")
        base["variant_error"] = v.get("error")
        base["variant_wall_seconds"] = v.get("wall_seconds")
        base["fsck_problems"] = len(v.get("fsck_problems") or [])
        for k in ("erase_count_min", "erase_count_max", "erase_count_mean"):
            base[k] = v.get(k)
        phases = v.get("phases") or []
        if not phases:
            rows.append(base)
        for ph in phases:
            row = dict(base)
            row.update(_flatten({k: x for k, x in ph.items() if not isinstance(x, list)}))
            rows.append(row)
    return rows


def frame(results: Any):
    """See `ossd.frame`."""
    import pandas as pd

    if isinstance(results, (str, os.PathLike)):
        path = os.fspath(results)
        try:
            with open(path, encoding="utf-8") as f:
                results = json.load(f)
        except (OSError, ValueError) as e:
            raise OssdError(f"{path}: not a readable JSON report: {e}") from None
    if _is_run_report(results):
        return pd.DataFrame([_flatten(results)])
    if _is_sweep(results):
        return pd.DataFrame([point_row(p) for p in results["points"]])
    if isinstance(results, list):
        if not results:
            return pd.DataFrame()
        if all(_is_run_report(r) for r in results):
            return pd.DataFrame([_flatten(r) for r in results])
        if all(_is_point(r) for r in results):
            return pd.DataFrame([point_row(p) for p in results])
        if all(_is_experiment(r) for r in results):
            return pd.DataFrame([row for e in results for row in _experiment_rows(e)])
    if _is_experiment(results):
        return pd.DataFrame(_experiment_rows(results))
    raise OssdError(
        "ossd.frame takes a run report (ossd.run, `ossd run --json`), a sweep (ossd.sweep, "
        "sweep.json), a reproduce report (ossd.reproduce, results.json) or a list of run "
        f"reports; got a {type(results).__name__}"
    )
