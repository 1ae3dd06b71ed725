#!/usr/bin/env bash
# The proportional set size of every process whose command name is NAME, summed (each shared page
# counted once in all: each process a share of it), split as the kernel splits it: anonymous,
# file-backed (mapped files and libraries) and shared memory. One line of JSON.
#   bench/pss.sh NAME
set -uo pipefail
name=$1
pids=$(pgrep -x "$name" || true)
n=0 pss=0 anon=0 file=0 shmem=0 rss=0
for p in $pids; do
  f=/proc/$p/smaps_rollup
  [ -r "$f" ] || continue
  read -r a b c d e < <(awk '/^Pss:/{p=$2} /^Pss_Anon:/{a=$2} /^Pss_File:/{f=$2} /^Pss_Shmem:/{s=$2}
                           /^Rss:/{r=$2} END{print p, a, f, s, r}' "$f")
  [ -n "$a" ] || continue
  n=$((n + 1)) pss=$((pss + a)) anon=$((anon + b)) file=$((file + c)) shmem=$((shmem + d)) rss=$((rss + e))
done
echo "{\"processes\": $n, \"pss_kib\": $pss, \"pss_anon_kib\": $anon, \"pss_file_kib\": $file," \
  "\"pss_shmem_kib\": $shmem, \"rss_kib\": $rss}"
