#!/bin/bash
# Runs railnet's libFuzzer targets for a bounded time each and fails on any crash, leak,
# sanitizer report, timeout or broken invariant.
#   fuzz/run.sh SECONDS [TARGET...]     (default: every fuzz/*.c)
# Binaries come from $FUZZ_BUILD/bin (make fuzz-build). Each target starts from its seed
# corpus fuzz/corpus/<target>/ (read only) plus the inputs earlier runs found, kept in
# $FUZZ_BUILD/corpus/<target>/. A failing input is saved as $FUZZ_BUILD/artifacts/<target>-*
# and its log as $FUZZ_BUILD/logs/<target>.log; reproduce with
#   $FUZZ_BUILD/bin/<target> <artifact>
# FUZZ_COUNTS_FILE=F: also write "passed failed skipped" to F (the make test tier).
# FUZZ_JOBS=N: run N targets at a time (default 1; each target is one process).
set -u
cd "$(dirname "$0")/.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*.c; do targets+=("$(basename "$f" .c)"); done
fi
mkdir -p "$FUZZ_BUILD/logs" "$FUZZ_BUILD/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
jobs=${FUZZ_JOBS:-1}
case "$jobs" in ''|*[!0-9]*|0) echo "fuzz/run.sh: FUZZ_JOBS must be a number >= 1 (got '$jobs')" >&2; exit 2 ;; esac
echo "fuzz: ${#targets[@]} targets x ${secs} s, $jobs at a time"
# One target: its verdict (and the lines that explain a failure) into $FUZZ_BUILD/logs/<t>.result.
run_one() {
  local t=$1 bin="$FUZZ_BUILD/bin/$1" log="$FUZZ_BUILD/logs/$1.log" work="$FUZZ_BUILD/corpus/$1"
  local res="$FUZZ_BUILD/logs/$1.result" start rc runs cov
  mkdir -p "$work" "fuzz/corpus/$t"
  if [ ! -x "$bin" ]; then
    echo "FAIL fuzz/$t: $bin is missing (make fuzz-build)" >"$res"
    return
  fi
  start=$(date +%s)
  # a hard stop well after -max_total_time: a target stuck outside libFuzzer's timer
  timeout --kill-after=10 $((secs + 60)) "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/artifacts/$t-" "$work" "fuzz/corpus/$t" \
    >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    echo "PASS fuzz/$t: ${runs:-?} runs in $(( $(date +%s) - start )) s, ${cov:-cov: ?}" >"$res"
  else
    { echo "FAIL fuzz/$t (exit $rc): see $log"
      grep -E 'ERROR: |SUMMARY: |runtime error|fuzz check failed|Test unit written' "$log" | head -10 | sed 's/^/  /'
    } >"$res"
  fi
}
for t in "${targets[@]}"; do
  rm -f "$FUZZ_BUILD/logs/$t.result"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_one "$t" &
done
wait
pass=0 fail=0
for t in "${targets[@]}"; do
  res="$FUZZ_BUILD/logs/$t.result"
  [ -f "$res" ] || echo "FAIL fuzz/$t: no result (the runner was killed)" >"$res"
  cat "$res"
  if grep -q '^PASS' "$res"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
[ -n "${FUZZ_COUNTS_FILE:-}" ] && echo "$pass $fail 0" >"$FUZZ_COUNTS_FILE"
[ "$fail" -eq 0 ]
