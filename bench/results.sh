# shellcheck shell=bash
# Sourced by bench/*.sh at the top of a run (not by their call-backs inside the VM or a
# namespace): the run's whole output (stdout and stderr) goes to the terminal and to
#   bench/results/<YYYY-MM-DD>-<name>.txt        (UTC date; -2, -3, ... for a second run that day)
# headed by the command line, the commit and the host, so that measurements live in dated
# files (bench/results/README.md) rather than in prose. BENCH_RESULTS=0 writes no file;
# BENCH_RESULTS_DIR=DIR writes them there instead. A script that another bench script runs
# (bench/ib.sh runs bench/softroce-perftest.sh) writes into its caller's file.
#   railnetBenchResults NAME "$0" "$@"    (re-runs the script under tee; returns only when
#                                          no file is written)
railnetBenchResults() {
  local name=$1 self=$2
  shift 2
  [ "${BENCH_RESULTS:-1}" = 0 ] && return 0
  local a
  for a in "$@"; do case "$a" in -h|--help) return 0 ;; esac; done # usage only: no file
  [ -n "${RAILNET_BENCH_RESULT_FILE:-}" ] && return 0
  local repo dir stamp f n=1
  repo=$(cd "$(dirname "$self")/.." && pwd)
  dir=${BENCH_RESULTS_DIR:-$repo/bench/results}
  mkdir -p "$dir" || return 0
  stamp=$(date -u +%Y-%m-%d)
  f="$dir/$stamp-$name.txt"
  while [ -e "$f" ]; do n=$((n + 1)); f="$dir/$stamp-$name-$n.txt"; done
  {
    echo "# $(basename "$self") $*"
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)," \
         "host $(uname -n), $(nproc 2>/dev/null || echo '?') CPUs, load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
  } >"$f"
  echo "bench: the output goes to $f too" >&2
  export RAILNET_BENCH_RESULT_FILE=$f
  set -o pipefail
  "$self" "$@" 2>&1 | tee -a "$f"
  exit $?
}
