#!/bin/bash
# Runs every test tier that can run on this machine and prints one summary line:
#   N passed, N failed, N skipped
# A tier that cannot run says why; its tests count as skipped.
# TIERS (comma-separated; default all) runs only the tiers named: unit, netns, softroce,
# memcheck, fuzz, sanitize, pkg (make check is TIERS=unit). A tier left out says so and
# counts nothing.
set -u
BUILD=${BUILD:-build}
SOFTROCE=${SOFTROCE:-1}
TIERS=${TIERS:-all}
ALL_TIERS="unit netns softroce memcheck fuzz sanitize pkg"
for t in ${TIERS//,/ }; do
  case " all $ALL_TIERS " in
    *" $t "*) ;;
    *) echo "TIERS=$TIERS: unknown tier '$t' (tiers: all ${ALL_TIERS// /, })" >&2; exit 2 ;;
  esac
done
# tier NAME: true when TIERS selects it (else says so once)
tier() {
  case ",$TIERS," in
    *,all,* | *,"$1",*) return 0 ;;
  esac
  echo "== tier $1: not in TIERS=$TIERS"
  return 1
}
export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RAILNET_BUILD="$PWD/$BUILD"
# sanitized builds (make test SANITIZE=address,undefined): reports are fatal, leaks by design suppressed
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/test/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[ -n "${SANITIZE:-}" ] && echo "== sanitizers: $SANITIZE (build in $BUILD)"
PASSED=0 FAILED=0 SKIPPED=0
LOGDIR="$BUILD/test/logs"
mkdir -p "$LOGDIR"
# the fault matrix is read from these logs at the end: none may be left from an earlier run
rm -f "$LOGDIR"/*.log "$LOGDIR"/softroce/*.log
. test/gtest-count.sh

# skip_all BIN REASON: count every test of BIN as skipped.
skip_all() {
  local n
  n=$("$1" --gtest_list_tests 2>/dev/null | grep -c '^  ')
  echo "SKIP: $2 ($n tests)"
  SKIPPED=$((SKIPPED + n))
}

# run_gtest NAME BIN [ARGS]: one GoogleTest binary, its log in $LOGDIR/NAME.log. With
# SHARDS=n (n > 1) it runs as n GoogleTest shards at once (GTEST_TOTAL_SHARDS), each in a
# process of its own (NAME.log.0 ...; NAME.log has them all): the unit tier waits more than
# it computes, so make check runs it that way (UNIT_SHARDS).
run_gtest() {
  local name=$1 bin=$2 log="$LOGDIR/$1.log" rc n=${SHARDS:-1} i
  shift 2
  if [ "$n" -le 1 ]; then
    echo "== tier $name: $bin"
    timeout --kill-after=10 "${TIER_TIMEOUT:-900}" "$bin" --gtest_color=no "$@" >"$log" 2>&1
    rc=$?
  else
    echo "== tier $name: $bin ($n shards at once)"
    local pids=()
    for ((i = 0; i < n; i++)); do
      GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout --kill-after=10 "${TIER_TIMEOUT:-900}" "$bin" \
        --gtest_color=no "$@" >"$log.$i" 2>&1 &
      pids+=($!)
    done
    local rcs=()
    for ((i = 0; i < n; i++)); do
      wait "${pids[$i]}"
      rcs+=($?)
    done
    for ((i = 0; i < n; i++)); do cat "$log.$i"; done >"$log"
  fi
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\]|^SKIP:|^FAULT-MATRIX|Failure|WARN' "$log" | grep -v -E '^\[  (FAILED|SKIPPED) \] [0-9]+ test' | head -400
  if [ "$n" -le 1 ]; then
    count_gtest "$log" "$rc"
  else
    for ((i = 0; i < n; i++)); do count_gtest "$log.$i" "${rcs[$i]}"; done
  fi
}

# 1. unit
if tier unit; then
  SHARDS=${UNIT_SHARDS:-1} run_gtest unit "$BUILD/test/unit_tests"
fi

# 2. netns: real network namespaces and veth pairs, as root
if [ -x "$BUILD/test/netns_tests" ] && tier netns; then
  if [ "$(id -u)" -ne 0 ]; then
    skip_all "$BUILD/test/netns_tests" "netns tier needs root (network namespaces, veth)"
  elif ! ip netns add railnet-probe-$$ 2>/dev/null; then
    skip_all "$BUILD/test/netns_tests" "netns tier: 'ip netns add' failed on this machine"
  else
    ip netns del railnet-probe-$$
    run_gtest netns "$BUILD/test/netns_tests"
  fi
fi

# 3. soft-RoCE: IB tests against rdma_rxe (in a qemu VM unless the host has RDMA)
if [ -x test/softroce/tier.sh ] && tier softroce; then
  if [ "$SOFTROCE" = 0 ]; then
    echo "SKIP: soft-RoCE tier disabled by SOFTROCE=0"
    SKIPPED=$((SKIPPED + $(test/softroce/tier.sh --count)))
  else
    out="$LOGDIR/softroce.counts"
    rm -f "$out"
    test/softroce/tier.sh --counts-file "$out"
    if [ -f "$out" ]; then
      read -r p f s <"$out"
      PASSED=$((PASSED + p)); FAILED=$((FAILED + f)); SKIPPED=$((SKIPPED + s))
    else
      echo "soft-RoCE tier ended without results: counted as 1 failure"
      FAILED=$((FAILED + 1))
    fi
  fi
fi

# 4. memcheck: valgrind over the Socket transport and socket layer unit tests (one test)
if [ -x test/memcheck.sh ] && tier memcheck; then
  out="$LOGDIR/memcheck.counts"
  rm -f "$out"
  BUILD="$BUILD" test/memcheck.sh --counts-file "$out"
  if [ -f "$out" ]; then
    read -r p f s <"$out"
    PASSED=$((PASSED + p)); FAILED=$((FAILED + f)); SKIPPED=$((SKIPPED + s))
  else
    FAILED=$((FAILED + 1))
  fi
fi

# 5. fuzz: a short libFuzzer pass over every target in fuzz/ (one test per target)
if [ -x fuzz/tier.sh ] && tier fuzz; then
  out="$LOGDIR/fuzz.counts"
  rm -f "$out"
  fuzz/tier.sh --counts-file "$out"
  if [ -f "$out" ]; then
    read -r p f s <"$out"
    PASSED=$((PASSED + p)); FAILED=$((FAILED + f)); SKIPPED=$((SKIPPED + s))
  else
    echo "fuzz tier ended without results: counted as 1 failure"
    FAILED=$((FAILED + 1))
  fi
fi

# 6. sanitizers: the unit, netns and soft-RoCE tiers again, built with
#    -fsanitize=address,undefined in their own tree (skipped when this run is itself
#    sanitized, or SANITIZE_TIER=0)
if ! tier sanitize; then
  :
elif [ -n "${SANITIZE:-}" ] || [ "${SANITIZE_TIER:-1}" = 0 ]; then
  echo "SKIP: sanitizer tier (this run is ${SANITIZE:+already sanitized}${SANITIZE:-disabled by SANITIZE_TIER=0})"
else
  SANBUILD=build-address-undefined
  echo "== tier sanitize: building the tests under ASan+UBSan in $SANBUILD"
  if make --no-print-directory -s SANITIZE=address,undefined BUILD=$SANBUILD sanitize-build >"$LOGDIR/sanitize-build.log" 2>&1; then
    LD_LIBRARY_PATH="$PWD/$SANBUILD/lib" run_gtest sanitize-unit "$SANBUILD/test/unit_tests"
    if [ "$(id -u)" -eq 0 ] && [ -x "$SANBUILD/test/netns_tests" ]; then
      LD_LIBRARY_PATH="$PWD/$SANBUILD/lib" run_gtest sanitize-netns "$SANBUILD/test/netns_tests"
    fi
    # the soft-RoCE tier's binaries, sanitized, in the same VM image as the plain tier
    if [ "$SOFTROCE" = 0 ]; then
      echo "SKIP: sanitized soft-RoCE tier (SOFTROCE=0) ($(test/softroce/tier.sh --count) tests)"
      SKIPPED=$((SKIPPED + $(test/softroce/tier.sh --count)))
    elif make --no-print-directory -s SANITIZE=address,undefined BUILD=$SANBUILD sanitize-softroce-build \
         >>"$LOGDIR/sanitize-build.log" 2>&1; then
      [ -e "$SANBUILD/softroce" ] || ln -s "$PWD/$BUILD/softroce" "$SANBUILD/softroce"
      out="$LOGDIR/softroce-sanitize.counts"
      rm -f "$out"
      echo "== tier sanitize-softroce: the soft-RoCE tier's binaries under ASan+UBSan"
      LD_LIBRARY_PATH="$PWD/$SANBUILD/lib" RAILNET_BUILD="$PWD/$SANBUILD" \
        SOFTROCE_LOGDIR="$PWD/$LOGDIR/softroce-sanitize" test/softroce/tier.sh --counts-file "$out"
      if [ -f "$out" ]; then
        read -r p f s <"$out"
        PASSED=$((PASSED + p)); FAILED=$((FAILED + f)); SKIPPED=$((SKIPPED + s))
      else
        echo "sanitized soft-RoCE tier ended without results: counted as 1 failure"
        FAILED=$((FAILED + 1))
      fi
    else
      tail -n 30 "$LOGDIR/sanitize-build.log"
      echo "sanitized soft-RoCE build failed: counted as 1 failure"
      FAILED=$((FAILED + 1))
    fi
  else
    tail -n 30 "$LOGDIR/sanitize-build.log"
    echo "sanitized build failed: counted as 1 failure"
    FAILED=$((FAILED + 1))
  fi
fi

# 7. pkg: the man pages, test/gpu/run-nccl.sh on a host without a GPU, and (root) the
#    Debian package built, installed, used and purged (test/pkg/tier.sh)
if [ -x test/pkg/tier.sh ] && tier pkg; then
  out="$LOGDIR/pkg.counts"
  rm -f "$out"
  BUILD="$BUILD" test/pkg/tier.sh --counts-file "$out"
  if [ -f "$out" ]; then
    read -r p f s <"$out"
    PASSED=$((PASSED + p)); FAILED=$((FAILED + f)); SKIPPED=$((SKIPPED + s))
  else
    echo "pkg tier ended without results: counted as 1 failure"
    FAILED=$((FAILED + 1))
  fi
fi

# The fault matrix of this run: one row per case of the netns (Socket) and soft-RoCE (IB,
# and Socket under netem in the VM) tiers.
rows=$(cat "$LOGDIR/netns.log" "$LOGDIR"/softroce/*.log 2>/dev/null | grep '^FAULT-MATRIX' | sed 's/^FAULT-MATRIX //')
if [ -n "$rows" ]; then
  echo "== fault matrix ($(echo "$rows" | wc -l) cases): transport | case | outcome | time from the fault to the outcome"
  echo "$rows"
fi

echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" -eq 0 ]
