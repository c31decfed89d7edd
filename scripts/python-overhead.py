#!/usr/bin/env python3
"""The Python API's overhead against the CLI on one run (docs/PERFORMANCE.md).

Runs the same settings N times each way, alternating: the CLI (`ossd run --set ... --json`)
and a fresh Python process calling `ossd.run(...)`. For each it records the process's wall
and CPU (user + system) seconds, from starting the process to its exit, and the run's own
`wall_seconds` from its report; it checks that the reports agree, then prints the medians.

    python3 scripts/python-overhead.py --bin target/py/ossd --runs 5
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

SETTINGS = {
    "device": "poftl",
    "workload.kind": "rand-write",
    "workload.requests": 2000000,
    "utilisation": 0.85,
    "verify": False,
}


def timed(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="target/py/ossd")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    import ossd

    sets = ossd.settings_to_sets(SETTINGS)
    rows = {"cli": [], "python": []}
    with tempfile.TemporaryDirectory() as d:
        cli_json, py_json = os.path.join(d, "cli.json"), os.path.join(d, "py.json")
        cli = [a.bin, "run", "--json", cli_json] + [x for s in sets for x in ("--set", s)]
        py = [sys.executable, "-c",
              "import json, sys, ossd; r = ossd.run(json.loads(sys.argv[1])); "
              "open(sys.argv[2], 'w').write(json.dumps(r))", json.dumps(SETTINGS), py_json]
        for _ in range(a.runs):
            for name, cmd, out in (("cli", cli, cli_json), ("python", py, py_json)):
                wall, cpu = timed(cmd)
                rep = json.load(open(out))
                rows[name].append((wall, cpu, rep["wall_seconds"], rep))
        strip = lambda r: {k: v for k, v in r.items() if k not in ("wall_seconds", "requests_per_wall_second")}
        same = all(strip(r[3]) == strip(rows["cli"][0][3]) for n in rows for r in rows[n])
    print(f"settings {json.dumps(SETTINGS)}; {a.runs} runs each, alternating; reports identical: {same}")
    med = {}
    for name, rs in rows.items():
        med[name] = [statistics.median(r[i] for r in rs) for i in range(3)]
        print(f"{name:>7}: process wall {med[name][0]:.3f} s, process CPU {med[name][1]:.3f} s, "
              f"run's wall_seconds {med[name][2]:.3f} s  (all walls: {', '.join(f'{r[0]:.2f}' for r in rs)})")
    for i, what in enumerate(["process wall", "process CPU", "run's wall_seconds"]):
        print(f"python / cli, {what}: {100 * (med['python'][i] / med['cli'][i] - 1):+.1f}%")
    if not same:
        sys.exit("the reports differ")


if __name__ == "__main__":
    main()
