#!/bin/bash
# repeat.sh [-o OUTDIR] N FILTER : runs the soft-RoCE tests that match the GoogleTest FILTER
# N times in a row, each run its own command in one VM boot (run-vm.sh), and prints one line
# per run and the count of runs that failed. For flakiness hunts; `make test` does not run it.
#   test/softroce/repeat.sh 10 '*IbFailover*'
# Each run may take SOFTROCE_CMD_TIMEOUT seconds (default 480); the VM gets N times that.
# Exit status: 0 every run passed, 1 some run failed, 2 the VM failed.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD_DIR=${RAILNET_BUILD:-$REPO/build}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$REPO/$BUILD_DIR ;; esac
OUT=$BUILD_DIR/softroce/repeat
if [ "${1:-}" = -o ]; then OUT=$2; shift 2; fi
if [ $# -ne 2 ] || ! [ "$1" -ge 1 ] 2>/dev/null; then sed -n '2,4p' "$0" | sed 's/^# //' >&2; exit 2; fi
n=$1 filter=$2
bin=$BUILD_DIR/test/ib_tests
[ -x "$bin" ] || { echo "repeat.sh: $bin is not built (make test-build)" >&2; exit 2; }
cmd=${SOFTROCE_CMD_TIMEOUT:-480}
jobs=()
for i in $(seq 1 "$n"); do jobs+=("run$i=$bin --gtest_color=no --gtest_filter=$filter"); done
SOFTROCE_CMD_TIMEOUT=$cmd SOFTROCE_VM_TIMEOUT=$((n * cmd + 120)) "$HERE/run-vm.sh" -q -o "$OUT" "${jobs[@]}"
vrc=$?
[ $vrc -eq 2 ] && { echo "repeat.sh: the VM failed (see $OUT/console.log)"; exit 2; }
failed=0
for i in $(seq 1 "$n"); do
  log=$OUT/run$i.log
  rc=$(cat "$OUT/run$i.rc" 2>/dev/null || echo none)
  summary=$(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$log" 2>/dev/null | tr '\n' ' ')
  echo "run $i: exit $rc ${summary:-no summary}"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$log" 2>/dev/null | sort -u | sed 's/^/    /'
  [ "$rc" = 0 ] || failed=$((failed + 1))
done
echo "repeat.sh: $failed of $n runs failed ($filter; logs in $OUT)"
[ $failed -eq 0 ]
