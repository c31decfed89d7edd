"""Parameter sweeps: every point of a grid is one `ossd.run`, on Ray or on local processes.

A grid (TOML, or the same as a dict) names the axes and the fixed settings:

    name = "gc-policies"                 # optional (default: the file's stem)
    [fixed]                              # settings every point shares (`--set` keys)
    device = "tiny"
    "workload.kind" = "rand-write"
    [axes]                               # each a non-empty list; points are their product
    "fml.victim_policy" = ["greedy", "cost-benefit", "fifo"]
    utilisation = [0.5, 0.7, 0.9]
    seed = [1, 2, 3]

Each point is keyed by a hash of its whole settings. A finished point is written at once to
OUT/points/KEY.json, so an interrupted sweep resumes where it stopped: points already
finished are not run again (failed ones are). At the end every point is gathered into
OUT/results.csv (and results.parquet when pyarrow is installed), OUT/sweep.json, and
OUT/report.md with plots. A failed point is reported with its settings and error and never
stops the rest.

Executors: "ray" (a local Ray cluster on all cores, or the cluster at `ray_address`),
"processes" (a pool of local processes, `jobs` of them, default all cores), or "auto" (Ray
when it can be imported, else processes, said loudly).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import itertools
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

from . import settings_to_sets
from ._ossd import OssdError
from ._ossd import check_json as _check_json
from ._ossd import run_json as _run_json

try:  # Python 3.11+
    import tomllib as _toml
except ImportError:  # pragma: no cover - older Pythons install tomli (pyproject.toml)
    import tomli as _toml

# The figures the report tabulates and plots, when present.
REPORT_FIGURES = ("write_amplification", "throughput_mib_s", "p99_us")


class Grid:
    """A parsed grid: its name, fixed settings and axes (each flattened to dotted keys)."""

    def __init__(self, name: str, fixed: dict[str, Any], axes: dict[str, list[Any]]):
        self.name = name
        self.fixed = fixed
        self.axes = axes

    def points(self) -> list[dict[str, Any]]:
        """Every point's whole settings, in the axes' order (the last axis varies fastest)."""
        names = list(self.axes)
        out = []
        for values in itertools.product(*(self.axes[n] for n in names)):
            s = dict(self.fixed)
            s.update(zip(names, values))
            out.append(s)
        return out


def _flatten(where: str, d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            if not v:
                raise OssdError(f"{where}: {key} is an empty table")
            out.update(_flatten(where, v, key + "."))
        else:
            out[key] = v
    return out


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool))


def parse_grid(grid: Union[str, os.PathLike, Mapping[str, Any]], name: Optional[str] = None) -> Grid:
    """Reads a grid from a TOML file or a dict; every mistake is an `OssdError` naming the
    file and the key."""
    if isinstance(grid, Mapping):
        where = "grid"
        doc = dict(grid)
        default_name = "sweep"
    else:
        path = Path(os.fspath(grid))
        where = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise OssdError(f"cannot read the grid {path}: {e.strerror or e}") from None
        try:
            # Python's parser keeps the file's order of keys: the axes' order is the points'.
            doc = _toml.loads(text)
        except _toml.TOMLDecodeError as e:
            raise OssdError(f"{where} is not valid TOML: {e}") from None
        default_name = path.stem
    unknown = sorted(set(doc) - {"name", "fixed", "axes"})
    if unknown:
        raise OssdError(
            f"{where}: unknown key(s) {', '.join(unknown)}: a grid has name, [fixed] and [axes]"
        )
    gname = doc.get("name", name or default_name)
    if not isinstance(gname, str) or not gname:
        raise OssdError(f"{where}: name is a non-empty string")
    fixed_doc = doc.get("fixed", {})
    if not isinstance(fixed_doc, Mapping):
        raise OssdError(f"{where}: fixed is a table of settings")
    fixed = _flatten(where + ": fixed", fixed_doc)
    for k, v in fixed.items():
        if not _scalar(v):
            raise OssdError(f"{where}: fixed.{k}: a setting is a string, number or boolean, got {v!r}")
    axes_doc = doc.get("axes")
    if not isinstance(axes_doc, Mapping) or not axes_doc:
        raise OssdError(f"{where}: [axes] is missing or empty: name at least one axis")
    axes = _flatten(where + ": axes", axes_doc)
    for k, v in axes.items():
        if not isinstance(v, list) or not v:
            raise OssdError(f"{where}: axes.{k}: an axis is a non-empty list of values, got {v!r}")
        for x in v:
            if not _scalar(x):
                raise OssdError(f"{where}: axes.{k}: {x!r} is not a string, number or boolean")
        if len(set(map(json.dumps, v))) != len(v):
            raise OssdError(f"{where}: axes.{k}: a value is repeated")
        if k in fixed:
            raise OssdError(f"{where}: {k} is both an axis and a fixed setting")
    return Grid(gname, fixed, axes)


def point_key(settings: Mapping[str, Any]) -> str:
    """A point's key: a hash of its whole settings (order and nesting do not matter)."""
    canon = json.dumps(
        {k: settings[k] for k in sorted(settings)}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def run_point(settings: dict[str, Any]) -> dict[str, Any]:
    """Runs one point; never raises for the point's own failure (it is returned instead)."""
    start = time.perf_counter()
    try:
        report = json.loads(_run_json(settings_to_sets(settings), None))
        out = {"status": "ok", "report": report}
    except Exception as e:  # noqa: BLE001 - a failed point is data, not a crash
        out = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    out["point_wall_seconds"] = time.perf_counter() - start
    out["host"] = os.uname().nodename
    return out


# --- executors -----------------------------------------------------------------------------

Done = Callable[[str, dict[str, Any]], None]


def _run_ray(todo: list[tuple[str, dict]], done: Done, ray_address: Optional[str]) -> dict:
    try:
        import ray
    except ImportError as e:
        raise OssdError(
            f"ray is not installed ({e}): pip install 'ray[default]', or run on local processes "
            "(--local, executor='processes')"
        ) from None

    started_here = False
    t0 = time.perf_counter()
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
        if ray_address:
            kwargs["address"] = ray_address
        else:
            kwargs["include_dashboard"] = False
        try:
            ray.init(**kwargs)
        except Exception as e:  # noqa: BLE001 - Ray raises several kinds; all mean "no cluster"
            where = f"the Ray cluster at {ray_address}" if ray_address else "a local Ray cluster"
            raise OssdError(f"cannot reach {where}: {type(e).__name__}: {e}") from None
        started_here = True
    try:
        cores = int(ray.cluster_resources().get("CPU", 0))
        startup = time.perf_counter() - t0
        remote = ray.remote(num_cpus=1, max_retries=0)(run_point)
        pending = {remote.remote(s): (key, s) for key, s in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                key, s = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - a dead worker fails its point only
                    result = {"status": "failed", "error": f"ray: {type(e).__name__}: {e}"}
                done(key, result)
    finally:
        if started_here:
            ray.shutdown()
    return {
        "executor": "ray",
        "cores": cores,
        "ray_address": ray_address or "local",
        "startup_seconds": startup,
    }


def _run_processes(
    todo: list[tuple[str, dict]],
    done: Done,
    jobs: int,
    point: Callable[[dict[str, Any]], dict[str, Any]] = run_point,
) -> dict:
    """Runs `point` (a module-level function, for pickling) on each settings of `todo` in a
    pool of `jobs` local processes, calling `done` with each result as it arrives."""
    ctx = multiprocessing.get_context("spawn")
    queue = list(todo)
    while queue:
        with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futures = {pool.submit(point, s): (key, s) for key, s in queue}
            queue = []
            broken: list[tuple[str, dict]] = []
            for f in cf.as_completed(futures):
                key, s = futures[f]
                try:
                    done(key, f.result())
                except cf.process.BrokenProcessPool:
                    broken.append((key, s))
        if broken:
            # A worker died (a crash, or killed for memory): run each point that was in the
            # broken pool alone, so the one that kills its process fails and the rest run.
            for key, s in broken:
                with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as solo:
                    try:
                        done(key, solo.submit(point, s).result())
                    except cf.process.BrokenProcessPool as e:
                        done(key, {"status": "failed", "error": f"the worker process died: {e}"})
    return {"executor": "processes", "cores": jobs, "startup_seconds": 0.0}


def _ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


class _Progress:
    """A tqdm bar when tqdm is installed, else one line per finished point on stderr."""

    def __init__(self, total: int, name: str, enabled: bool):
        self.total, self.n, self.failed, self.enabled = total, 0, 0, enabled
        self.bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm

                self.bar = tqdm(total=total, desc=f"sweep {name}", unit="point")
            except ImportError:
                pass

    def update(self, failed: bool) -> None:
        self.n += 1
        self.failed += failed
        if self.bar is not None:
            self.bar.update(1)
            if self.failed:
                self.bar.set_postfix(failed=self.failed)
        elif self.enabled:
            print(f"  point {self.n}/{self.total} done ({self.failed} failed)", file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# --- the sweep -----------------------------------------------------------------------------


def sweep(
    grid: Union[str, os.PathLike, Mapping[str, Any]],
    out: Union[str, os.PathLike, None] = None,
    *,
    executor: str = "auto",
    ray_address: Optional[str] = None,
    jobs: Optional[int] = None,
    progress: bool = True,
    plots: bool = True,
) -> dict[str, Any]:
    """Runs every point of `grid` not finished already in `out` (default out/sweep/NAME), then
    writes results.csv (and .parquet), sweep.json and report.md there. Returns sweep.json's
    content: the summary and every point (settings, status, error or report)."""
    g = parse_grid(grid)
    if executor not in ("auto", "ray", "processes"):
        raise OssdError(f"executor {executor!r}: use auto, ray or processes")
    if jobs is not None and jobs < 1:
        raise OssdError(f"jobs must be at least 1, got {jobs}")
    if ray_address and executor == "processes":
        raise OssdError("a Ray address goes with the ray executor, not processes")
    outdir = Path(os.fspath(out)) if out is not None else Path("out/sweep") / g.name
    pdir = outdir / "points"
    pdir.mkdir(parents=True, exist_ok=True)

    points = g.points()
    keyed = [(point_key(s), s) for s in points]
    if len({k for k, _ in keyed}) != len(keyed):
        raise OssdError(f"{g.name}: two points have the same settings")
    finished: dict[str, dict] = {}
    todo: list[tuple[str, dict]] = []
    for key, s in keyed:
        f = pdir / f"{key}.json"
        if f.exists():
            try:
                rec = json.loads(f.read_text(encoding="utf-8"))
            except ValueError:
                rec = None  # a torn write: run it again
            if rec and rec.get("status") == "ok" and rec.get("settings") == s:
                finished[key] = rec
                continue
        todo.append((key, s))
    reused = len(finished)

    chosen = executor
    if chosen == "auto":
        chosen = "ray" if (ray_address or _ray_available()) else "processes"
        if chosen == "processes":
            print(
                "NOTE: ray is not installed (pip install ray): the sweep runs on local processes",
                file=sys.stderr,
            )
    bar = _Progress(len(todo), g.name, progress and bool(todo))

    def done(key: str, result: dict[str, Any]) -> None:
        s = dict(keyed_settings[key])
        rec = {"key": key, "settings": s, **result}
        tmp = pdir / f".{key}.json.tmp"
        tmp.write_text(json.dumps(rec), encoding="utf-8")
        os.replace(tmp, pdir / f"{key}.json")
        finished[key] = rec
        bar.update(rec["status"] != "ok")

    keyed_settings = dict(keyed)
    start = time.perf_counter()
    info: dict[str, Any] = {"executor": chosen, "cores": jobs or os.cpu_count() or 1}
    try:
        if todo and chosen == "ray":
            info = _run_ray(todo, done, ray_address)
        elif todo:
            info = _run_processes(todo, done, jobs or os.cpu_count() or 1)
    finally:
        bar.close()
    wall = time.perf_counter() - start

    records = [finished[k] for k, _ in keyed if k in finished]
    ran = [r for r in records if r["key"] in {k for k, _ in todo}]
    point_seconds = [r["point_wall_seconds"] for r in ran if "point_wall_seconds" in r]
    mean = sum(point_seconds) / len(point_seconds) if point_seconds else 0.0
    cores = max(1, int(info.get("cores") or 1))
    summary = {
        "name": g.name,
        "out": str(outdir),
        "axes": g.axes,
        "fixed": g.fixed,
        "points_total": len(points),
        "points_run": len(todo),
        "points_reused": reused,
        "points_failed": sum(r["status"] != "ok" for r in records),
        "wall_seconds": wall,
        "mean_point_seconds": mean,
        "ideal_seconds": len(point_seconds) * mean / cores,
        **info,
        "cores": cores,
    }
    result = {**summary, "points": records}
    _write_outputs(outdir, g, result, plots)
    return result


def _write_outputs(outdir: Path, g: Grid, result: dict[str, Any], plots: bool) -> None:
    (outdir / "sweep.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    rows = None
    try:
        from .frames import frame

        df = frame(result)
        df.to_csv(outdir / "results.csv", index=False)
        rows = df
        try:
            import pyarrow  # noqa: F401

            df.to_parquet(outdir / "results.parquet", index=False)
        except ImportError:
            pass
    except ImportError:
        _write_csv_plain(outdir / "results.csv", result)
    figures = []
    if plots and rows is not None:
        figures = _plot(outdir, g, rows)
    _write_report(outdir, g, result, figures)


def _write_csv_plain(path: Path, result: dict[str, Any]) -> None:
    import csv

    from .frames import point_row

    rows = [point_row(p) for p in result["points"]]
    cols: list[str] = []
    for r in rows:
        cols.extend(c for c in r if c not in cols)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


def _plot(outdir: Path, g: Grid, df) -> list[str]:
    """One PNG per figure: the figure against the first numeric axis (other than seed), a
    line per combination of the other axes, mean and standard deviation over seeds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    ok = df[df["status"] == "ok"]
    numeric = [
        a for a in g.axes
        if a != "seed" and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in g.axes[a])
    ]
    if ok.empty or not numeric:
        return []
    x = numeric[0]
    others = [a for a in g.axes if a not in (x, "seed")]
    names = []
    for fig_name in REPORT_FIGURES:
        if fig_name not in ok.columns:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        groups = ok.groupby(others, dropna=False) if others else [((), ok)]
        for label, sub in groups:
            agg = sub.groupby(x)[fig_name].agg(["mean", "std"]).reset_index()
            lab = ", ".join(map(str, label if isinstance(label, tuple) else (label,))) or fig_name
            ax.errorbar(agg[x], agg["mean"], yerr=agg["std"].fillna(0), marker="o", capsize=3, label=lab)
        ax.set_xlabel(x)
        ax.set_ylabel(fig_name)
        ax.set_title(f"{g.name}: {fig_name}")
        ax.grid(alpha=0.3)
        if others:
            ax.legend(fontsize=8)
        fig.tight_layout()
        name = f"{fig_name}.png"
        fig.savefig(outdir / name, dpi=100)
        plt.close(fig)
        names.append(name)
    return names


def _md(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _write_report(outdir: Path, g: Grid, r: dict[str, Any], figures: list[str]) -> None:
    lines = [
        f"# Sweep {g.name}",
        "",
        f"{r['points_total']} points ({r['points_run']} run now, {r['points_reused']} finished "
        f"before), {r['points_failed']} failed; executor {r['executor']} on {r['cores']} cores.",
        "",
        f"Wall time {r['wall_seconds']:.2f} s (of which starting the executor "
        f"{r.get('startup_seconds', 0.0):.2f} s); mean point {r['mean_point_seconds']:.3f} s; "
        f"points run x mean / cores = {r['ideal_seconds']:.2f} s.",
        "",
        "Fixed: " + (", ".join(f"`{k}={_md(v)}`" for k, v in g.fixed.items()) or "none"),
        "",
        "Axes: " + ", ".join(f"`{k}` = {', '.join(_md(x) for x in v)}" for k, v in g.axes.items()),
        "",
        "Every point: results.csv (results.parquet), sweep.json, points/KEY.json.",
        "",
    ]
    failed = [p for p in r["points"] if p["status"] != "ok"]
    if failed:
        lines += ["## Failed points", "", "| key | settings | error |", "|---|---|---|"]
        for p in failed:
            s = ", ".join(f"{k}={_md(p['settings'][k])}" for k in g.axes)
            lines.append(f"| {p['key']} | {s} | {_md(p.get('error'))} |")
        lines.append("")
    for f in figures:
        lines += [f"![{f}]({f})", ""]
    axes = list(g.axes)
    lines += ["## Points", "", "| " + " | ".join(axes + ["status"] + list(REPORT_FIGURES)) + " |"]
    lines.append("|" + "---|" * (len(axes) + 1 + len(REPORT_FIGURES)))
    for p in r["points"]:
        rep = p.get("report") or {}
        cells = [_md(p["settings"][a]) for a in axes] + [p["status"]]
        cells += [_md(rep[f]) if f in rep else "" for f in REPORT_FIGURES]
        lines.append("| " + " | ".join(cells) + " |")
    (outdir / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def check_points(grid: Union[str, os.PathLike, Mapping[str, Any]]) -> list[tuple[dict, Optional[str]]]:
    """Each point's settings and the error `ossd run` would give them (None when valid)."""
    out = []
    for s in parse_grid(grid).points():
        try:
            _check_json(settings_to_sets(s), None)
            out.append((s, None))
        except OssdError as e:
            out.append((s, str(e)))
    return out


def main(argv: Optional[Iterable[str]] = None) -> int:
    """`python -m ossd sweep GRID ...` (what `ossd sweep` runs)."""
    p = argparse.ArgumentParser(prog="ossd sweep", description="Run every point of a grid on Ray or local processes.")
    p.add_argument("grid", help="the grid file (TOML: name, [fixed], [axes])")
    p.add_argument("--out", help="where results go [default: out/sweep/NAME]")
    p.add_argument("--ray-address", help="a Ray cluster's address (default: a local cluster on all cores)")
    p.add_argument("--local", action="store_true", help="local processes, not Ray")
    p.add_argument("--jobs", type=int, help="local processes [default: all cores]")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true", help="list the points and check their settings; run nothing")
    a = p.parse_args(list(argv) if argv is not None else None)
    try:
        if a.dry_run:
            bad = 0
            for s, e in check_points(a.grid):
                print(f"{point_key(s)}  {json.dumps(s)}" + (f"\n    error: {e}" if e else ""))
                bad += e is not None
            print(f"{bad} invalid point(s)")
            return 1 if bad else 0
        if a.local and a.ray_address:
            raise OssdError("--local and --ray-address do not go together")
        r = sweep(
            a.grid,
            a.out,
            executor="processes" if a.local else ("ray" if a.ray_address else "auto"),
            ray_address=a.ray_address,
            jobs=a.jobs,
            progress=not a.no_progress,
        )
    except OssdError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"sweep {r['name']}: {r['points_total']} points ({r['points_run']} run, {r['points_reused']} "
        f"reused, {r['points_failed']} failed) on {r['executor']} with {r['cores']} cores in "
        f"{r['wall_seconds']:.2f} s, {r.get('startup_seconds', 0.0):.2f} s of it starting the "
        f"executor (mean point {r['mean_point_seconds']:.3f} s; points x mean / cores = "
        f"{r['ideal_seconds']:.2f} s)"
    )
    for pnt in r["points"]:
        if pnt["status"] != "ok":
            print(f"  FAILED {pnt['key']} {json.dumps(pnt['settings'])}: {pnt.get('error')}")
    print(f"report: {Path(r['out']) / 'report.md'}; results: {Path(r['out']) / 'results.csv'}")
    return 1 if r["points_failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
