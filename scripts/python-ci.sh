#!/usr/bin/env bash
# CI of the Python package (crates/py; docs/PYTHON.md): installs its tools with pip, builds the
# wheel with maturin and installs it, runs the pytest tests (crates/py/tests) and executes the
# notebook examples/notebooks/gc-policies.ipynb with nbclient. Each tool that is missing and
# cannot be installed prints a loud `SKIPPED: ...` line naming what is NOT tested; the script
# goes on with the rest. It fails if a build, a test or the notebook fails.
#
#   bash scripts/python-ci.sh            # PYTHON=python3.12 to pick the interpreter
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
start=$(date +%s)
failed=()

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "SKIPPED: $PY not found: the Python package, its tests and the notebook are NOT tested"
  exit 0
fi
if ! command -v cargo >/dev/null 2>&1; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
"$PY" --version

# pip in a virtualenv, or the system's (Debian marks it externally managed).
pip_install() {
  "$PY" -m pip install -q "$@" 2>/dev/null || "$PY" -m pip install -q --break-system-packages "$@"
}
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  { command -v apt-get >/dev/null 2>&1 && apt-get update -qq && apt-get install -y -qq python3-pip >/dev/null; } ||
    "$PY" -m ensurepip >/dev/null 2>&1 || true
fi

# Module to import -> package to install.
declare -A tools=([maturin]=maturin [pytest]=pytest [pandas]=pandas [nbclient]=nbclient
  [ipykernel]=ipykernel [matplotlib]=matplotlib [ray]="ray[default]" [pyarrow]=pyarrow
  [nbformat]=nbformat [tqdm]=tqdm)
want=()
for m in "${!tools[@]}"; do
  "$PY" -c "import $m" >/dev/null 2>&1 || want+=("${tools[$m]}")
done
if [ ${#want[@]} -gt 0 ]; then
  echo "== pip install ${want[*]}"
  pip_install "${want[@]}" || echo "WARNING: pip could not install all of ${want[*]}; trying one by one"
  for p in "${want[@]}"; do
    m=${p%%[*}
    "$PY" -c "import $m" >/dev/null 2>&1 || pip_install "$p" || true
  done
fi
have() { "$PY" -c "import $1" >/dev/null 2>&1; }
for m in ray pyarrow tqdm; do
  have "$m" || echo "SKIPPED: $m is missing: sweeps on Ray / Parquet output / the progress bar are NOT tested"
done

# The Cargo profile of the wheel and the CLI: `py` (crates/py/pyproject.toml), or the one
# OSSD_PY_PROFILE names. CI passes `release`, with the release profile set like `py`, so that the
# binary it built for the main job serves here and the wheel shares its compiled dependencies.
PROFILE=${OSSD_PY_PROFILE:-py}
PROFILE_DIR=$PROFILE
echo "== build the wheel (maturin, profile $PROFILE) and install it"
if ! have maturin; then
  echo "SKIPPED: maturin is missing: the Python package is NOT built, NOT tested, and the notebook NOT run"
  exit 0
fi
rm -rf target/wheels/ossd-*.whl
if ! "$PY" -m maturin build -q --profile "$PROFILE" -m crates/py/Cargo.toml -o target/wheels; then
  echo "FAILED: maturin build"
  exit 1
fi
pip_install --force-reinstall --no-deps target/wheels/ossd-*.whl || { echo "FAILED: installing the wheel"; exit 1; }
# The CLI, same profile, for the tests that compare the two and run `ossd sweep`.
cargo build -q --profile "$PROFILE" -p ossd || failed+=("cargo build --profile $PROFILE -p ossd")
export OSSD_BIN=$PWD/target/$PROFILE_DIR/ossd OSSD_PYTHON=$(command -v "$PY")

echo "== pytest crates/py/tests"
if have pytest && have pandas; then
  "$PY" -m pytest -q -rs crates/py/tests || failed+=(pytest)
else
  echo "SKIPPED: pytest or pandas is missing: the Python package's tests are NOT run"
fi

echo "== notebook examples/notebooks/gc-policies.ipynb (nbclient)"
if have nbclient && have nbformat && have ipykernel && have matplotlib && have pandas; then
  # The plot goes to target/, not over docs/img/gc-policies.png.
  if OSSD_PLOT_PNG=$PWD/target/ci-gc-policies.png OSSD_SWEEP_OUT=$PWD/target/ci-sweep-gc-policies \
    "$PY" - <<'PYEOF'
import nbformat
from nbclient import NotebookClient
nb = nbformat.read("examples/notebooks/gc-policies.ipynb", as_version=4)
NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": "examples/notebooks"}}).execute()
nbformat.write(nb, "target/ci-gc-policies.ipynb")
print("notebook executed: target/ci-gc-policies.ipynb, plot target/ci-gc-policies.png")
PYEOF
  then
    test -s target/ci-gc-policies.png || failed+=("notebook plot missing")
  else
    failed+=(notebook)
  fi
else
  echo "SKIPPED: nbclient, nbformat, ipykernel, matplotlib or pandas is missing: the notebook is NOT run"
fi

echo "== python CI took $(($(date +%s) - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "python CI passed"
