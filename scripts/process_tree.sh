#!/usr/bin/env bash
# A process and every process below it, one pid a line, each parent before its children: what
# where_stuck.sh reports on and what gpu_check.sh ends when a step runs out of time.
#   bash scripts/process_tree.sh PID
set -u
# The parent pid of a process (field 4 of /proc/PID/stat, counted after the command's name,
# which may hold spaces).
ppid_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f2; }
tree() {
  echo "$1"
  local p
  for p in /proc/[0-9]*; do
    [ "$(ppid_of "${p#/proc/}")" = "$1" ] && tree "${p#/proc/}"
  done
}
tree "${1:?usage: process_tree.sh PID}"
