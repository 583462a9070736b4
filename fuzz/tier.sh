#!/bin/bash
# The fuzz tier of make test: builds the libFuzzer targets (make fuzz-build) and runs each
# for FUZZ_TEST_SECONDS (default 30) seconds, FUZZ_JOBS (default: the number of CPUs, at
# most 4) targets at a time. One test per target.
#   fuzz/tier.sh --count            number of targets
#   fuzz/tier.sh --counts-file F    run; write "passed failed skipped" to F
# Skipped, with the reason, when clang cannot build a libFuzzer binary here
# (Debian: apt-get install clang libclang-rt-14-dev) or FUZZ_TEST_SECONDS=0.
set -u
cd "$(dirname "$0")/.."
n=$(ls fuzz/*.c 2>/dev/null | wc -l)
[ "${1:-}" = --count ] && { echo "$n"; exit 0; }
out=${2:?usage: fuzz/tier.sh --counts-file FILE}
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_CC=${FUZZ_CC:-clang}
secs=${FUZZ_TEST_SECONDS:-30}
FUZZ_JOBS=${FUZZ_JOBS:-$(n=$(nproc 2>/dev/null || echo 1); [ "$n" -gt 4 ] && n=4; echo "$n")}
export FUZZ_JOBS
echo "== tier fuzz: $n libFuzzer targets x $secs s, $FUZZ_JOBS at a time"
skip() { echo "SKIP: fuzz tier: $1 ($n tests)"; echo "0 0 $n" >"$out"; exit 0; }
[ "$secs" = 0 ] && skip "disabled by FUZZ_TEST_SECONDS=0"
command -v "$FUZZ_CC" >/dev/null || skip "no $FUZZ_CC (apt-get install clang libclang-rt-14-dev)"
mkdir -p "$FUZZ_BUILD/logs"
probe="$FUZZ_BUILD/logs/probe"
if ! echo 'int LLVMFuzzerTestOneInput(const unsigned char* d, unsigned long s) { (void)d; (void)s; return 0; }' |
    "$FUZZ_CC" -fsanitize=fuzzer,address,undefined -x c - -o "$probe" >"$probe.log" 2>&1; then
  skip "$FUZZ_CC cannot link -fsanitize=fuzzer,address,undefined: $(grep -m1 -o 'cannot find.*\|error:.*' "$probe.log") (apt-get install libclang-rt-14-dev)"
fi
if ! make --no-print-directory FUZZ_BUILD="$FUZZ_BUILD" fuzz-build >"$FUZZ_BUILD/logs/build.log" 2>&1; then
  echo "FAIL: make fuzz-build failed (see $FUZZ_BUILD/logs/build.log):"
  grep -E 'error' "$FUZZ_BUILD/logs/build.log" | head -10 | sed 's/^/  /'
  echo "0 $n 0" >"$out"
  exit 0
fi
FUZZ_BUILD="$FUZZ_BUILD" FUZZ_COUNTS_FILE="$out" fuzz/run.sh "$secs"
[ -f "$out" ] || echo "0 $n 0" >"$out"
