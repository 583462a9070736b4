#!/bin/bash
# The soft-RoCE tier of `make test` (called by test/run-tests.sh from the repo root).
#   tier.sh --count             print how many tests the tier would run (SOFTROCE=0 skips them)
#   tier.sh --counts-file F     run them; print the tier's log, write "PASSED FAILED SKIPPED" to F
# The tier's binaries: build/test/softroce/*_test (from test/softroce/*_test.c) and
# build/test/ib_tests (from test/ib/*.cc, once there are any), all GoogleTest-speaking.
# They run in one VM boot (run-vm.sh), or on the host when it has an active RDMA port.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD_DIR=${RAILNET_BUILD:-$REPO/build}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$REPO/$BUILD_DIR ;; esac
export RAILNET_BUILD=$BUILD_DIR
PASSED=0 FAILED=0 SKIPPED=0
# shellcheck source=../gtest-count.sh
. "$REPO/test/gtest-count.sh"

bins=()
for src in "$HERE"/*_test.c; do
  [ -e "$src" ] && bins+=("$BUILD_DIR/test/softroce/$(basename "${src%.c}")")
done
compgen -G "$REPO/test/ib/*.cc" >/dev/null && bins+=("$BUILD_DIR/test/ib_tests")

list_count() { # tests in one binary (1 when it cannot say: it will count as one failure)
  local n
  n=$("$1" --gtest_list_tests 2>/dev/null | grep -c '^  ')
  echo "${n:-1}" | sed 's/^0$/1/'
}

case "${1:-}" in
  --count)
    total=0
    for b in "${bins[@]}"; do total=$((total + $(list_count "$b"))); done
    echo "$total"
    exit 0 ;;
  --counts-file) COUNTS=${2:?--counts-file needs a file} ;;
  *) sed -n '2,4p' "$0" >&2; exit 2 ;;
esac

echo "== tier soft-RoCE: ${#bins[@]} binaries"
t0=$(date +%s)
OUT=${SOFTROCE_LOGDIR:-$BUILD_DIR/test/logs/softroce}
jobs=() missing=0
for b in "${bins[@]}"; do
  if [ ! -x "$b" ]; then
    echo "soft-RoCE: $b is not built (make test-build): counted as 1 failure"
    missing=$((missing + 1))
    continue
  fi
  jobs+=("$(basename "$b")=$b --gtest_color=no")
done
FAILED=$((FAILED + missing))

ran=0 mode=vm devs=""
if [ ${#jobs[@]} -gt 0 ]; then
  if [ -z "${SOFTROCE_RUN_ON:-}" ] && ! command -v qemu-system-x86_64 >/dev/null &&
     ! { command -v ibv_devinfo >/dev/null && ibv_devinfo 2>/dev/null | grep -q PORT_ACTIVE; }; then
    n=0
    for b in "${bins[@]}"; do n=$((n + $(list_count "$b"))); done
    echo "SKIP: soft-RoCE tier: no RDMA device here and qemu-system-x86_64 is not installed" \
         "(scripts/deps.sh test installs it) ($n tests)"
    echo "$PASSED $FAILED $((SKIPPED + n))" >"$COUNTS"
    exit 0
  fi
  # ib_tests is one command: ~330 s plain and ~400 s sanitized on 2 cores (TCG, 2026-12), more
  # on a busy host; run-vm.sh's defaults (180 s a command, 280 s the VM) are for short runs
  SOFTROCE_CMD_TIMEOUT=${SOFTROCE_CMD_TIMEOUT:-560} SOFTROCE_VM_TIMEOUT=${SOFTROCE_VM_TIMEOUT:-680} \
    "$HERE/run-vm.sh" -o "$OUT" "${jobs[@]}"
  vrc=$?
  [ $vrc -eq 2 ] && echo "soft-RoCE: the VM failed: each binary counts as a failure"
  grep -q '^rxe ok' "$OUT/status" 2>/dev/null && devs=$(sed -n 's/^rxe ok //p' "$OUT/status")
  [ -f "$OUT/setup.log" ] && ! grep -q '^net:' "$OUT/setup.log" && mode=host
  for j in "${jobs[@]}"; do
    name=${j%%=*} bin=${j#*=}
    log="$OUT/$name.log"
    rc=$(cat "$OUT/$name.rc" 2>/dev/null || echo 255)
    echo "== soft-RoCE: ${bin% --gtest_color=no} (exit $rc; log: $log)"
    [ -f "$log" ] || : >"$log"
    # Each result line, and each failure with the two lines that explain it.
    grep -E -A2 'Failure$' "$log" | grep -v '^--$' | head -200
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|^SKIP:|^FAULT-MATRIX|WARN' "$log" |
      grep -v -E '^\[  (FAILED|SKIPPED) \] [0-9]+ test' | head -400
    count_gtest "$log" "$rc"
    ran=$((ran + 1))
  done
fi
echo "soft-RoCE tier: $([ "$mode" = vm ] && echo "VM (Debian kernel $(cat "$BUILD_DIR/softroce/kernel/version" 2>/dev/null), TCG)" || echo host)," \
     "devices: ${devs:-none}, $ran binaries, $((PASSED + FAILED + SKIPPED)) tests:" \
     "$PASSED passed, $FAILED failed, $SKIPPED skipped, $(( $(date +%s) - t0 )) s"
echo "$PASSED $FAILED $SKIPPED" >"$COUNTS"
