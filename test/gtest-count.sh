# Sourced by the tier scripts: adds one GoogleTest binary's results to
# PASSED / FAILED / SKIPPED (which the caller initialises).
# count_gtest LOG RC: add a gtest binary's results to the totals.
count_gtest() {
  local log=$1 rc=$2 p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*, listed below.*/\1/p' "$log" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*, listed below.*/\1/p' "$log" | tail -1)
  if [ -z "$p" ] && [ -z "$f" ]; then
    echo "  (no GoogleTest summary: the binary crashed or was killed, rc=$rc; counted as 1 failure)"
    FAILED=$((FAILED + 1))
    return
  fi
  PASSED=$((PASSED + ${p:-0})); FAILED=$((FAILED + ${f:-0})); SKIPPED=$((SKIPPED + ${s:-0}))
  if [ "$rc" -ne 0 ] && [ -z "$f" ]; then FAILED=$((FAILED + 1)); fi
}

