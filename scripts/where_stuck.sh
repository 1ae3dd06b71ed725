#!/usr/bin/env bash
# Where is a process tree stuck? For PID and every process below it: its command line, each
# thread's name, state and kernel wait channel, what its stdout is and that file's last lines (a
# test rank's log), and, where gdb is installed, each thread's stack.
#
#   bash scripts/where_stuck.sh PID [GDB_SECONDS]
#
# gpu_check.sh runs it on a step that ran out of time, before killing the step, so that a hang
# on the GPU machine (which is gone after the call) is reported with who and where. GDB_SECONDS
# (default 8) bounds each gdb attach.
set -u
root=${1:?usage: where_stuck.sh PID [GDB_SECONDS]}
gdb_s=${2:-8}

for pid in $(bash "$(dirname "$0")/process_tree.sh" "$root"); do
  [ -d "/proc/$pid" ] || continue
  parent=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f2)
  echo "=== pid $pid (parent $parent): $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-300)"
  for task in /proc/"$pid"/task/*; do
    printf '  thread %-8s %-16s %s wchan=%s\n' "${task##*/}" "$(cat "$task/comm" 2>/dev/null)" \
      "$(sed 's/.*) //' "$task/stat" 2>/dev/null | cut -d' ' -f1)" "$(cat "$task/wchan" 2>/dev/null)"
  done
  out="$(readlink "/proc/$pid/fd/1" 2>/dev/null)"
  echo "  stdout: ${out:-?}"
  if [ -f "$out" ]; then tail -n 8 "$out" | sed 's/^/    | /'; fi
  if command -v gdb >/dev/null; then
    timeout "$gdb_s" gdb -p "$pid" -batch -nx -ex 'thread apply all bt 12' 2>/dev/null |
      grep -E '^(Thread|#)' | sed 's/^/  /'
  fi
done
