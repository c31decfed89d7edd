#!/usr/bin/env bash
# POSIX conformance of the OFS FUSE mount (`ossd mount`), each tool on a freshly formatted and
# mounted image, each mount unmounted cleanly and fsck'ed after:
#   pjdfstest  the Rust port (crates.io `pjdfstest`), as root; exclusions in
#              scripts/pjdfstest.toml, each with its reason in docs/OFS.md
#   fsx        crates.io `fsx` (fsx-rs by Alan Somers), FSX_OPS operations (default 100,000) in
#              FSX_RUNS runs (default 4) of different seeds: fsx-rs 0.3.2 never unmaps its
#              mapread mappings, so one long run slows down with every mapping it leaks
#   fio        verify=crc32c after sequential and random writes
#   dbench     DBENCH_SECS seconds (default 30), 4 clients
#
# Installs nothing: a missing tool is SKIPPED loudly ("SKIPPED: ... NOT tested"). Exits non-zero
# if anything failed (a test, a daemon panic, an unclean unmount, fsck problems). The last line
# counts the tools: "conformance: N passed, N failed, N skipped".
#
# Usage: scripts/mount-conformance.sh [tool ...]    (tools: pjdfstest fsx fio dbench; default all)
# Environment: OSSD (the binary; default target/release/ossd), FSX_OPS, FSX_RUNS, DBENCH_SECS;
# the images live in /dev/shm when it is there (a tmpfs: the mount's fsyncs reach the image
# file, and a disk's fdatasync would dominate the run), else in TMPDIR.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

OSSD=${OSSD:-$root/target/release/ossd}
case $OSSD in /*) ;; *) OSSD=$root/$OSSD ;; esac
FSX_OPS=${FSX_OPS:-100000}
FSX_RUNS=${FSX_RUNS:-4}
DBENCH_SECS=${DBENCH_SECS:-30}
tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(pjdfstest fsx fio dbench)

passed=0
failed=0
skipped=0
summary=()

pass() { passed=$((passed + 1)); summary+=("PASSED: $1"); echo "PASSED: $1"; }
fail() { failed=$((failed + 1)); summary+=("FAILED: $1"); echo "FAILED: $1"; }
skip() { skipped=$((skipped + 1)); summary+=("SKIPPED: $1 NOT tested"); echo "SKIPPED: $1 NOT tested"; }

finish() {
  echo "== mount conformance"
  printf '%s\n' "${summary[@]}"
  echo "conformance: $passed passed, $failed failed, $skipped skipped"
  [ "$failed" -eq 0 ]
  exit $?
}

if [ ! -x "$OSSD" ]; then
  echo "$OSSD is missing: build it first (cargo build --release -p ossd)"
  exit 1
fi
if [ ! -e /dev/fuse ]; then
  for t in "${tools[@]}"; do skip "$t: /dev/fuse is missing;"; done
  finish
fi
if [ "$(id -u)" != 0 ] && ! command -v fusermount3 >/dev/null 2>&1; then
  for t in "${tools[@]}"; do skip "$t: not root and fusermount3 (fuse3) is missing;"; done
  finish
fi

base=${TMPDIR:-/tmp}
[ -d /dev/shm ] && [ -w /dev/shm ] && base=/dev/shm
work=$(mktemp -d "$base/ossd-conformance.XXXXXX")
# Searchable by everyone: pjdfstest runs calls as other users (the mount allows others).
chmod 755 "$work"
daemon_pid=""
mnt=""

unmount() {
  [ -n "$mnt" ] || return 0
  if command -v fusermount3 >/dev/null 2>&1; then
    fusermount3 -u "$mnt" 2>/dev/null || umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
  else
    umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
  fi
  local i=0
  while [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null && [ $i -lt 600 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
    echo "the mount daemon $daemon_pid did not end after unmount: killing it"
    kill -9 "$daemon_pid" 2>/dev/null
  fi
  daemon_pid=""
  mnt=""
}
cleanup() {
  unmount
  rm -rf "$work"
}
trap cleanup EXIT

# mount_fresh NAME DEVICE: formats $work/NAME/dev.img with OFS and mounts it at $work/NAME/mnt.
mount_fresh() {
  local dir=$work/$1
  mkdir -p "$dir/mnt"
  "$OSSD" format --image "$dir/dev.img" --device "$2" --fs ofs >/dev/null || return 1
  local out
  out=$("$OSSD" mount --daemon --allow-other --image "$dir/dev.img" "$dir/mnt" --log "$dir/daemon.log") || {
    cat "$dir/daemon.log"
    return 1
  }
  daemon_pid=$(sed -n 's/.*daemon pid \([0-9]*\).*/\1/p' <<<"$out")
  mnt=$dir/mnt
}

# unmount_and_check NAME: unmounts cleanly; the daemon must not have panicked and fsck must
# find the image clean.
unmount_and_check() {
  local dir=$work/$1 ok=0
  unmount
  if grep -qi "panic" "$dir/daemon.log"; then
    echo "$1: the mount daemon panicked:"
    cat "$dir/daemon.log"
    ok=1
  fi
  if ! grep -q "closed cleanly" "$dir/daemon.log"; then
    echo "$1: the mount did not end cleanly:"
    cat "$dir/daemon.log"
    ok=1
  fi
  local report
  report=$("$OSSD" fsck --image "$dir/dev.img" 2>&1)
  if ! grep -q "OFS: 0 problems" <<<"$report" || ! grep -q "^clean" <<<"$report"; then
    echo "$1: fsck after unmount:"
    echo "$report"
    ok=1
  fi
  rm -f "$dir/dev.img"
  return $ok
}

run_pjdfstest() {
  if ! command -v pjdfstest >/dev/null 2>&1; then
    skip "pjdfstest: not installed (cargo install pjdfstest --locked; needs libacl1-dev);"
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    skip "pjdfstest: needs root (it switches users and makes device nodes);"
    return
  fi
  if ! getent passwd nobody daemon >/dev/null || ! getent group nogroup daemon >/dev/null; then
    skip "pjdfstest: the users nobody and daemon (groups nogroup, daemon) are missing;"
    return
  fi
  echo "== pjdfstest"
  mount_fresh pjdfstest nandsim-128m || { fail "pjdfstest: could not mount"; return; }
  mkdir -p "$work/other-fs"
  local log=$work/pjdfstest.log rc
  (cd "$mnt" && pjdfstest -c "$root/scripts/pjdfstest.toml" -p "$mnt" -s "$work/other-fs") >"$log" 2>&1
  rc=$?
  # The failures with their first line of explanation, then the summary.
  awk '/ FAILED$|PASSED UNEXPECTEDLY/ { print; getline; print }' "$log"
  local counts
  counts=$(grep "^Summary:" "$log" | tail -1)
  echo "pjdfstest ${counts:-printed no summary}"
  unmount_and_check pjdfstest || rc=1
  if [ $rc -eq 0 ] && [ -n "$counts" ]; then
    pass "pjdfstest (${counts#Summary: })"
  else
    tail -20 "$log"
    fail "pjdfstest (${counts:-no summary}; log above)"
  fi
}

run_fsx() {
  if ! command -v fsx >/dev/null 2>&1; then
    skip "fsx: not installed (cargo install fsx --locked);"
    return
  fi
  local per_run=$((FSX_OPS / FSX_RUNS))
  echo "== fsx: $FSX_OPS operations in $FSX_RUNS runs of $per_run"
  mount_fresh fsx nandsim-128m || { fail "fsx: could not mount"; return; }
  # Every operation fsx-rs has that OFS supports; hole punching is not built (EOPNOTSUPP).
  cat >"$work/fsx.toml" <<'EOF'
flen = 262144
[opsize]
max = 65536
[weights]
close_open = 1
read = 10
write = 10
mapread = 10
mapwrite = 10
invalidate = 1
truncate = 5
fsync = 1
fdatasync = 1
posix_fallocate = 1
sendfile = 1
posix_fadvise = 1
copy_file_range = 1
EOF
  local rc=0 run ok=0 start=$SECONDS
  for run in $(seq 1 "$FSX_RUNS"); do
    if (cd "$work" && fsx -f "$work/fsx.toml" -N "$per_run" -S "$run" -P "$work" "$mnt/fsx-$run") \
      >"$work/fsx-$run.log" 2>&1 && grep -q "All operations completed A-OK" "$work/fsx-$run.log"; then
      ok=$((ok + 1))
      echo "fsx seed $run: $per_run operations, all A-OK"
    else
      rc=1
      echo "fsx seed $run failed:"
      tail -40 "$work/fsx-$run.log"
    fi
  done
  unmount_and_check fsx || rc=1
  if [ $rc -eq 0 ]; then
    pass "fsx ($((ok * per_run)) operations in $FSX_RUNS runs, 0 failures, $((SECONDS - start)) s)"
  else
    fail "fsx ($ok of $FSX_RUNS runs of $per_run operations passed; logs above)"
  fi
}

run_fio() {
  if ! command -v fio >/dev/null 2>&1; then
    skip "fio: not installed (apt-get install fio);"
    return
  fi
  echo "== fio verify=crc32c"
  mount_fresh fio rawssd || { fail "fio: could not mount"; return; }
  cat >"$work/verify.fio" <<'EOF'
[global]
ioengine=psync
verify=crc32c
verify_fatal=1
do_verify=1
size=24m

[seq-write]
rw=write
bs=128k

[rand-write]
rw=randwrite
bs=4k
fsync=32
numjobs=2
EOF
  local rc
  (cd "$work" && fio --directory="$mnt" "$work/verify.fio") >"$work/fio.log" 2>&1
  rc=$?
  grep -E "err=|verify" "$work/fio.log"
  unmount_and_check fio || rc=1
  if [ $rc -eq 0 ] && [ "$(grep -c "err= 0" "$work/fio.log")" -eq 3 ] && ! grep -qi "verify.*fail\|bad magic\|crc32c.*wanted" "$work/fio.log"; then
    pass "fio (sequential 128k and 2 x random 4k writes of 24 MiB, verify=crc32c: 0 errors)"
  else
    cat "$work/fio.log"
    fail "fio verify (log above)"
  fi
}

run_dbench() {
  if ! command -v dbench >/dev/null 2>&1; then
    skip "dbench: not installed (apt-get install dbench);"
    return
  fi
  local loadfile=/usr/share/dbench/client.txt
  if [ ! -f "$loadfile" ]; then
    skip "dbench: its load file $loadfile is missing;"
    return
  fi
  echo "== dbench: $DBENCH_SECS s, 4 clients"
  mount_fresh dbench rawssd || { fail "dbench: could not mount"; return; }
  local rc
  dbench -c "$loadfile" -t "$DBENCH_SECS" -D "$mnt" 4 >"$work/dbench.log" 2>&1
  rc=$?
  # dbench reports a failed call as "... failed ..." or "ERROR"; the barrier semaphore (SysV
  # IPC, not the file system) may be refused in a container, which dbench survives.
  local errors
  errors=$(grep -iE "fail|error|unexpected|NT_STATUS" "$work/dbench.log" | grep -v "barrier semaphore")
  grep -E "^ *Throughput|^ Operation|^ *[A-Za-z]+ +[0-9]+ +[0-9.]+ +[0-9.]+$" "$work/dbench.log"
  unmount_and_check dbench || rc=1
  if [ $rc -eq 0 ] && [ -z "$errors" ] && grep -q "^Throughput" "$work/dbench.log"; then
    pass "dbench ($DBENCH_SECS s, 4 clients, 0 errors: $(grep "^Throughput" "$work/dbench.log"))"
  else
    echo "$errors"
    tail -40 "$work/dbench.log"
    fail "dbench (log above)"
  fi
}

for t in "${tools[@]}"; do
  case $t in
    pjdfstest) run_pjdfstest ;;
    fsx) run_fsx ;;
    fio) run_fio ;;
    dbench) run_dbench ;;
    *)
      echo "unknown tool $t (pjdfstest, fsx, fio, dbench)"
      fail "$t: unknown"
      ;;
  esac
done
finish
