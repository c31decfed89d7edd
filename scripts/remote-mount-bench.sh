#!/bin/bash
# Remote vs local OFS mount throughput, fio, --timing none, rawssd image.
set -u
B=${OSSD:-target/release/ossd}; B=$(realpath "$B")
D=/tmp/rbench; rm -rf $D; mkdir -p $D/mnt; cd $D
$B keygen --out key >/dev/null
run_fio() {  # $1 label
  local M=$D/mnt
  fio --name=seqw --directory=$M --rw=write --bs=128k --size=256m --end_fsync=1 --output-format=terse --terse-version=3 2>/dev/null | awk -F';' -v l="$1" '{printf "%s seq-write-128k %.1f MiB/s\n", l, $48/1024}'
  fio --name=seqw --directory=$M --rw=read --bs=128k --size=256m --output-format=terse --terse-version=3 2>/dev/null | awk -F';' -v l="$1" '{printf "%s seq-read-128k %.1f MiB/s\n", l, $7/1024}'
  fio --name=randw --directory=$M --rw=randwrite --bs=4k --size=64m --direct=1 --runtime=15 --time_based --output-format=terse --terse-version=3 2>/dev/null | awk -F';' -v l="$1" '{printf "%s rand-write-4k %d IOPS\n", l, $49}'
  rm -f $M/seqw* $M/randw*
}
for mode in local remote-oaq remote-direct; do
  rm -f dev.img*
  if [ $mode = local ]; then
    $B format --image dev.img --device rawssd --fs ofs >/dev/null
    $B mount --image dev.img --daemon mnt >/dev/null
  else
    $B format --image dev.img --device rawssd >/dev/null
    $B serve --image dev.img --listen 127.0.0.1:7499 --key-file key > serve.log 2>&1 &
    SP=$!; sleep 1
    extra=""; [ $mode = remote-direct ] && extra="--direct"
    $B mount --remote 127.0.0.1:7499 --key-file key --format $extra --daemon mnt >/dev/null
  fi
  run_fio $mode
  fusermount3 -u mnt; sleep 1
  [ $mode != local ] && { kill $SP; wait $SP 2>/dev/null; }
done
