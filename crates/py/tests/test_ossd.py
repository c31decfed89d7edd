"""Tests of the ossd Python package (crates/py): runs, errors, the GIL, reproduce, the object
store, frames and sweeps (local processes, Ray when installed, and `ossd sweep` from the CLI).

Run: pytest crates/py/tests (after `pip install ./crates/py`). The CLI comparisons need the
`ossd` binary: $OSSD_BIN, else target/{py,debug,release}/ossd; without it they are skipped,
and `pytest -rs` says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ossd

ROOT = Path(__file__).resolve().parents[3]

# A run of a fraction of a second on the 16 MiB device.
TINY = {
    "device": "tiny",
    "workload.kind": "rand-write",
    "workload.requests": 4000,
    "utilisation": 0.5,
    "seed": 3,
}

# Figures that measure the host, not the simulation.
WALL = {"wall_seconds", "requests_per_wall_second"}


def ossd_bin() -> Path | None:
    env = os.environ.get("OSSD_BIN")
    if env:
        return Path(env)
    for profile in ("py", "debug", "release"):
        p = ROOT / "target" / profile / "ossd"
        if p.exists():
            return p
    return None


def need_bin() -> Path:
    b = ossd_bin()
    if b is None:
        pytest.skip("SKIPPED: no ossd binary (set OSSD_BIN or cargo build -p ossd)")
    return b


def without_wall(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in WALL}


# --- presets and runs ----------------------------------------------------------------------


def test_presets_list_the_devices():
    ps = {p["name"]: p for p in ossd.presets()}
    assert "tiny" in ps and "rawssd" in ps
    tiny = ps["tiny"]
    assert tiny["capacity_bytes"] == 16 << 20
    assert tiny["config"]["geometry"]["pages_per_block"] == 32
    assert tiny["erase_unit_bytes"] % tiny["write_unit_bytes"] == 0


def test_run_gives_the_report_and_is_deterministic():
    a = ossd.run(TINY)
    b = ossd.run(TINY)
    assert a["device"] == "tiny" and a["seed"] == 3
    assert a["requests"] == 4000
    assert a["write_amplification"] >= 1.0
    assert without_wall(a) == without_wall(b)
    c = ossd.run({**TINY, "seed": 4})
    assert without_wall(c) != without_wall(a)


def test_nested_and_dotted_settings_are_the_same():
    nested = {
        "device": "tiny",
        "utilisation": 0.5,
        "seed": 3,
        "workload": {"kind": "rand-write", "requests": 4000},
    }
    assert without_wall(ossd.run(nested)) == without_wall(ossd.run(TINY))
    assert ossd.settings_to_sets({"fml": {"victim_policy": "fifo"}, "prefill": False}) == [
        "fml.victim_policy=fifo",
        "prefill=false",
    ]


def test_run_matches_the_cli(tmp_path):
    exe = need_bin()
    sets = ossd.settings_to_sets(TINY)
    out = tmp_path / "r.json"
    cmd = [str(exe), "run", "--json", str(out)]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, capture_output=True)
    cli = json.loads(out.read_text())
    assert without_wall(cli) == without_wall(ossd.run(TINY))


def test_config_file_is_taken(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('device = "tiny"\nutilisation = 0.5\n[workload]\nrequests = 1000\n')
    r = ossd.run({"seed": 2}, config=cfg)
    assert r["device"] == "tiny" and r["requests"] == 1000 and r["seed"] == 2


@pytest.mark.parametrize(
    "settings, words",
    [
        ({"nope": 1}, ["unknown field", "nope"]),
        ({"utilisation": 2.0}, ["utilisation"]),
        ({"device": "nosuch"}, ["unknown device preset"]),
        ({"fml.victim_policy": "lru"}, ["lru"]),
        ({"utilisation": [0.5]}, ["utilisation", "list"]),
        ({"utilisation": float("nan")}, ["utilisation", "finite"]),
    ],
)
def test_bad_settings_raise_ossd_error_with_the_rust_message(settings, words):
    with pytest.raises(ossd.OssdError) as e:
        ossd.run(settings)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_check_validates_without_running():
    cfg = ossd.check({"device": "tiny", "fml.victim_policy": "fifo"})
    assert cfg["fml"]["victim_policy"] == "fifo"
    with pytest.raises(ossd.OssdError, match="nope"):
        ossd.check({"nope": 1})


def test_runs_release_the_gil():
    """While one thread is inside a run, the main thread keeps running Python. If the run held
    the GIL, no main-thread step could land in the middle of the run."""
    stamps: list[float] = []
    span: dict[str, float] = {}
    settings = {**TINY, "workload.requests": 500000, "verify": False}

    def worker():
        span["start"] = time.perf_counter()
        ossd.run(settings)
        span["end"] = time.perf_counter()

    t = threading.Thread(target=worker)
    t.start()
    while t.is_alive():
        stamps.append(time.perf_counter())
        time.sleep(0.0005)
    t.join()
    d = span["end"] - span["start"]
    inside = [s for s in stamps if span["start"] + d / 4 < s < span["end"] - d / 4]
    assert len(inside) >= 5, f"{len(inside)} main-thread steps during the middle half of the run"


# --- reproduce ---------------------------------------------------------------------------


def test_reproduce_runs_an_experiment_and_writes_the_report(tmp_path):
    results = ossd.reproduce(
        scale=0.01,
        only=["002-iv-d"],
        jobs=2,
        out=tmp_path / "rep",
        experiments=ROOT / "experiments",
    )
    assert results and all(r["name"].startswith("002-iv-d") for r in results)
    assert results and all(v["error"] is None for r in results for v in r["variants"])
    assert (tmp_path / "rep" / "report.md").exists()
    on_disk = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert [r["name"] for r in on_disk] == [r["name"] for r in results]
    df = ossd.frame(results)
    assert set(df["experiment"]) == {r["name"] for r in results}
    assert len(df) == sum(max(1, len(v["phases"])) for r in results for v in r["variants"])


def test_reproduce_errors():
    with pytest.raises(ossd.OssdError, match="scale"):
        ossd.reproduce(scale=2.0, experiments=ROOT / "experiments")
    with pytest.raises(ossd.OssdError, match="no experiment"):
        ossd.reproduce(scale=0.01, only="no-such-experiment", experiments=ROOT / "experiments")


# --- the object store --------------------------------------------------------------------


def test_object_store_put_get_ls_stat_setattr_fsck(tmp_path):
    img = tmp_path / "dev.img"
    with ossd.ObjectStore.format(img, device="tiny") as s:
        a = s.put(b"hello object")
        b = s.put(b"x" * 70000, id=0x20000)
        assert b == 0x20000
        assert s.get(a) == b"hello object"
        assert s.get(hex(b)) == b"x" * 70000
        assert s.ls() == {ossd.DEFAULT_PARTITION: {a: 12, b: 70000}}
        s.setattr(a, "priority", 3)
        s.setattr(a, "0x1000", "tag")
        st = s.stat(a)
        assert st["priority"] == 3 and st["logical length"] == 12
        assert st["user"] == {0x1000: b"tag"}
        assert st["encryption"] == "none"
        f = s.fsck()
        assert f["clean"] and f["problems"] == [] and f["objects"] >= 3
        s.rm(a)
        assert s.ls(ossd.DEFAULT_PARTITION) == {ossd.DEFAULT_PARTITION: {b: 70000}}
    # Reopened: everything persisted.
    with ossd.ObjectStore(img) as s:
        assert s.get(b) == b"x" * 70000


def test_object_store_errors(tmp_path):
    with pytest.raises(ossd.OssdError, match="missing.img"):
        ossd.ObjectStore(tmp_path / "missing.img")
    with pytest.raises(ossd.OssdError, match="nosuch"):
        ossd.ObjectStore.format(tmp_path / "x.img", device="nosuch")
    img = tmp_path / "dev.img"
    s = ossd.ObjectStore.format(img, device="tiny")
    with pytest.raises(ossd.OssdError):
        ossd.ObjectStore(img)  # locked by s
    with pytest.raises(ossd.OssdError):
        s.get(0x99999)
    with pytest.raises(ossd.OssdError, match="not an id"):
        s.get("zz")
    with pytest.raises(ossd.OssdError, match="unknown attribute"):
        s.setattr(s.put(b"a"), "colour", "red")
    s.close()
    s.close()
    with pytest.raises(ossd.OssdError, match="closed"):
        s.ls()


def test_object_store_reads_what_the_cli_wrote(tmp_path):
    exe = need_bin()
    img = tmp_path / "cli.img"
    subprocess.run([str(exe), "format", "--image", str(img), "--device", "tiny"], check=True, capture_output=True)
    src = tmp_path / "f"
    src.write_bytes(b"from the cli")
    out = subprocess.run([str(exe), "put", "--image", str(img), str(src)], check=True, capture_output=True, text=True)
    oid = int(out.stdout.strip(), 16)
    with ossd.ObjectStore(img) as s:
        assert s.get(oid) == b"from the cli"


# --- frames ------------------------------------------------------------------------------


def test_frame_of_a_run_and_of_run_files(tmp_path):
    r = ossd.run(TINY)
    df = ossd.frame(r)
    assert len(df) == 1 and df["write_amplification"][0] == r["write_amplification"]
    assert "read_latency.p99_us" in df.columns
    p = tmp_path / "r.json"
    p.write_text(json.dumps(r))
    assert ossd.frame(str(p)).equals(df)
    assert len(ossd.frame([r, r])) == 2
    with pytest.raises(ossd.OssdError, match="ossd.frame takes"):
        ossd.frame({"something": "else"})


# --- sweeps ------------------------------------------------------------------------------

GRID = """
name = "t"
[fixed]
device = "tiny"
"workload.kind" = "rand-write"
"workload.requests" = 2000
[axes]
"fml.victim_policy" = ["greedy", "lru"]
utilisation = [0.4, 0.5]
"""


def test_grid_errors_name_the_file_and_key(tmp_path):
    bad = {
        "no axes": ('[fixed]\ndevice = "tiny"\n', "[axes]"),
        "scalar axis": ("[axes]\nutilisation = 0.5\n", "axes.utilisation"),
        "unknown key": ("[axis]\nseed = [1]\n", "unknown key"),
        "not toml": ("[axes\n", "not valid TOML"),
        "both": ('[fixed]\nseed = 1\n[axes]\nseed = [1, 2]\n', "both an axis and a fixed"),
        "repeat": ("[axes]\nseed = [1, 1]\n", "repeated"),
    }
    for name, (text, words) in bad.items():
        g = tmp_path / f"{name.replace(' ', '-')}.toml"
        g.write_text(text)
        with pytest.raises(ossd.OssdError) as e:
            ossd.sweep(g, tmp_path / "out")
        assert words in str(e.value) and str(g) in str(e.value), (name, str(e.value))


def check_sweep(r: dict, out: Path) -> None:
    assert r["points_total"] == 4
    failed = [p for p in r["points"] if p["status"] != "ok"]
    assert len(failed) == 2 and all(p["settings"]["fml.victim_policy"] == "lru" for p in failed)
    assert all("lru" in p["error"] for p in failed)
    ok = [p for p in r["points"] if p["status"] == "ok"]
    assert sorted(p["settings"]["utilisation"] for p in ok) == [0.4, 0.5]
    import pandas as pd

    df = pd.read_csv(out / "results.csv")
    assert len(df) == 4 and set(df["status"]) == {"ok", "failed"}
    assert "write_amplification" in df.columns and "fml.victim_policy" in df.columns
    report = (out / "report.md").read_text()
    assert "## Failed points" in report and "lru" in report
    # Each point's result is the same as a run of its settings.
    p = ok[0]
    assert without_wall(p["report"]) == without_wall(ossd.run(p["settings"]))


def test_sweep_on_processes_resumes_and_reports_failures(tmp_path):
    g = tmp_path / "grid.toml"
    g.write_text(GRID)
    out = tmp_path / "out"
    r = ossd.sweep(g, out, executor="processes", jobs=2, progress=False)
    assert r["executor"] == "processes" and r["points_run"] == 4 and r["points_reused"] == 0
    check_sweep(r, out)
    # Again: the finished points are not rerun; the failed ones are.
    r2 = ossd.sweep(g, out, executor="processes", jobs=2, progress=False)
    assert r2["points_reused"] == 2 and r2["points_run"] == 2
    check_sweep(r2, out)
    assert ossd.frame(r2).shape[0] == 4


def test_sweep_takes_a_dict_grid(tmp_path):
    grid = {
        "fixed": {"device": "tiny", "utilisation": 0.5, "workload": {"requests": 1000}},
        "axes": {"seed": [1, 2]},
    }
    r = ossd.sweep(grid, tmp_path / "o", executor="processes", jobs=1, progress=False)
    assert [p["settings"]["seed"] for p in r["points"]] == [1, 2]
    assert all(p["status"] == "ok" for p in r["points"])


def test_sweep_on_ray(tmp_path):
    pytest.importorskip("ray", reason="SKIPPED: ray is not installed")
    g = tmp_path / "grid.toml"
    g.write_text(GRID)
    out = tmp_path / "out"
    r = ossd.sweep(g, out, executor="ray", progress=False)
    assert r["executor"] == "ray" and r["cores"] >= 1
    check_sweep(r, out)


def test_cli_sweep_runs_the_driver(tmp_path):
    exe = need_bin()
    g = tmp_path / "grid.toml"
    g.write_text(GRID)
    out = tmp_path / "out"
    env = {**os.environ, "OSSD_PYTHON": sys.executable}
    p = subprocess.run(
        [str(exe), "sweep", str(g), "--local", "--jobs", "2", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, env=env,
    )
    assert p.returncode == 1, p.stderr  # two points fail
    assert "4 points" in p.stdout and "2 failed" in p.stdout and "FAILED" in p.stdout
    assert (out / "results.csv").exists()
    dry = subprocess.run([str(exe), "sweep", str(g), "--dry-run"], capture_output=True, text=True, env=env)
    assert dry.returncode == 1 and "2 invalid point(s)" in dry.stdout
    missing = subprocess.run(
        [str(exe), "sweep", str(g), "--python", str(tmp_path / "no-python")], capture_output=True, text=True
    )
    assert missing.returncode != 0 and "driver in Python" in missing.stderr


def test_grid_keeps_the_axes_order(tmp_path):
    from ossd.sweeps import parse_grid

    g = tmp_path / "g.toml"
    g.write_text('[axes]\nseed = [2, 1]\n"fml.victim_policy" = ["fifo", "greedy"]\nutilisation = [0.5]\n')
    grid = parse_grid(g)
    assert list(grid.axes) == ["seed", "fml.victim_policy", "utilisation"]
    assert [(p["seed"], p["fml.victim_policy"]) for p in grid.points()] == [
        (2, "fifo"), (2, "greedy"), (1, "fifo"), (1, "greedy"),
    ]


def _point_that_may_die(settings):
    """A point function for the pool test: seed 13 kills its worker process."""
    if settings["seed"] == 13:
        os._exit(3)
    return {"status": "ok", "report": {"seed": settings["seed"]}}


def test_a_dying_worker_fails_its_point_only():
    from ossd.sweeps import _run_processes

    todo = [(f"k{s}", {"seed": s}) for s in (11, 12, 13, 14, 15)]
    got = {}
    _run_processes(todo, lambda k, r: got.__setitem__(k, r), 2, _point_that_may_die)
    assert set(got) == {"k11", "k12", "k13", "k14", "k15"}
    assert got["k13"]["status"] == "failed" and "died" in got["k13"]["error"]
    assert all(got[k]["status"] == "ok" for k in ("k11", "k12", "k14", "k15"))



def test_without_ray_auto_runs_on_local_processes_and_says_so(tmp_path):
    # `sys.modules["ray"] = None` makes `import ray` fail, as on a machine without Ray.
    code = (
        "import sys, json; sys.modules['ray'] = None; import ossd; "
        "r = ossd.sweep({'fixed': {'device': 'tiny', 'utilisation': 0.5, 'workload.requests': 1000},"
        " 'axes': {'seed': [1, 2]}}, sys.argv[1], progress=False); "
        "print(json.dumps([r['executor'], [p['status'] for p in r['points']]]))"
    )
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "o")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == ["processes", ["ok", "ok"]]
    assert "ray is not installed" in p.stderr
