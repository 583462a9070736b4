#!/bin/bash
# valgrind memcheck over the Socket transport and socket layer unit tests. Fails on any
# memcheck error or definite leak, in the test process or in the children it forks.
#   test/memcheck.sh                 (make memcheck)
#   test/memcheck.sh --counts-file F the make test tier: one test; writes "passed failed skipped"
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
FILTER=${MEMCHECK_FILTER:-NetSocket*:Socket*}
out=
[ "${1:-}" = --counts-file ] && out=$2
log="$BUILD/test/logs/memcheck.log"
mkdir -p "$(dirname "$log")"
result() { [ -n "$out" ] && echo "$1 $2 $3" >"$out"; }
echo "== tier memcheck: valgrind on unit_tests --gtest_filter='$FILTER'"
if ! command -v valgrind >/dev/null; then
  echo "SKIP: memcheck tier: no valgrind (apt-get install valgrind) (1 test)"
  result 0 0 1
  exit 0
fi
if [ -n "${SANITIZE:-}" ]; then
  echo "SKIP: memcheck tier: valgrind cannot run a SANITIZE=$SANITIZE build (1 test)"
  result 0 0 1
  exit 0
fi
start=$(date +%s)
# the tests' own timeouts are sized for native speed: give them room. --fair-sched=yes:
# valgrind runs one thread at a time, and with its default lock a thread that polls in user
# space (a test() loop waiting on a helper thread's flag) takes the lock back at once and
# starves the helper threads: a 129-byte message then did not complete in 120 s.
RAILNET_SOCKET_TIMEOUT_MSEC=30000 \
timeout --kill-after=10 "${MEMCHECK_TIMEOUT:-900}" valgrind --tool=memcheck --fair-sched=yes --error-exitcode=99 --leak-check=full \
  --errors-for-leak-kinds=definite --show-leak-kinds=definite --track-origins=no --num-callers=30 \
  "$BUILD/test/unit_tests" --gtest_color=no --gtest_filter="$FILTER" >"$log" 2>&1
rc=$?
secs=$(( $(date +%s) - start ))
errs=$(grep -h 'ERROR SUMMARY:' "$log" | awk '{s += $4} END {print s + 0}')
leaks=$(grep -h 'definitely lost:' "$log" | awk '{gsub(",", "", $4); s += $4} END {print s + 0}')
tests=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
if [ "$rc" -eq 0 ] && [ "$errs" -eq 0 ] && [ "$leaks" -eq 0 ] && [ -n "$tests" ]; then
  echo "PASS memcheck: ${tests} tests, 0 errors, 0 bytes definitely lost ($secs s)"
  result 1 0 0
  exit 0
fi
echo "FAIL memcheck (exit $rc): $errs errors, $leaks bytes definitely lost, ${tests:-?} tests passed ($secs s); see $log"
grep -E '^==[0-9]+== (Invalid|Conditional|Syscall|.*definitely lost in)|^\[  FAILED' "$log" | head -20 | sed 's/^/  /'
result 0 1 0
exit 1
