#!/bin/bash
# bench/rma.sh [-o DIR] [--sizes "S ..."] [--mib M] [--lat-iters N] [--rounds R]
#
# railnet's one-sided RMA (build/bench/rma_bench over railnetGetRma(), rxe0 -> rxe1) against
# perftest on the same soft-RoCE link in ONE VM boot, in R rounds; each round runs
# ib_write_bw, ib_read_bw, ib_write_lat and ib_atomic_lat and then rma_bench, and takes its
# ratios to its own perftest figures; the median over the rounds is printed:
#   iput bandwidth      over ib_write_bw's                      (target: >= 0.95)
#   iget bandwidth      over ib_read_bw's
#   iputSignal round trip (8 B put + signal, the peer waits on the signal word and answers the
#                       same way) over 2 x ib_write_lat + ib_atomic_lat (typical, 8 B)
# Under TCG the absolute numbers mean little; read the ratios.
#
# Options:
#   --sizes "S ..."   bandwidth sizes (default: 65536 1048576 8388608)
#   --mib M           MiB per size for both tools (default 32): M MiB / size operations (8 .. 1000),
#                     at most 4 MiB in flight
#   --lat-iters N     round trips (both tools; default 200)
#   --rounds R        rounds (default 3)
#   -o DIR            result directory (default: $RAILNET_BUILD/softroce/bench-rma)
# Results: DIR/rma.log (every row, its round last: perftest's as in softroce-perftest.sh,
# rma_bench's as in bench/rma_bench.c) and the ratio table printed at the end.
# Inside the VM this script is called back as: rma.sh --in-vm SIZES MIB LAT_ITERS ROUNDS
set -u
# every run's output also goes to bench/results/<date>-rma.txt (bench/results.sh)
. "$(dirname "$0")/results.sh"
[ "${1:-}" = --in-vm ] || railnetBenchResults rma "$0" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BUILD=${RAILNET_BUILD:-$REPO/build}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac

if [ "${1:-}" = --in-vm ]; then
  sizes=$2 mib=$3 iters=$4 rounds=$5
  tsv=$SOFTROCE_OUT/rma.tsv
  : >"$tsv"
  # perftest KIND SIZES N TOOL: its rows, the round appended
  perftest() {
    "$HERE/softroce-perftest.sh" --in-vm "$@" | sed "s/\$/\t$r/" >>"$tsv"
    [ "${PIPESTATUS[0]}" = 0 ] || echo "rma.sh: $4 failed in round $r (its figures are left out)" >&2
  }
  for r in $(seq 1 "$rounds"); do
    perftest bwn "$sizes" "$mib" ib_write_bw
    perftest bwn "$sizes" "$mib" ib_read_bw
    perftest lat 8 "$iters" ib_write_lat
    perftest lat 8 "$iters" ib_atomic_lat
    # each rank picks RMA device = its rank: rxe0 then rxe1, as perftest's client and server
    NCCL_IB_HCA="=${SOFTROCE_DEVS// /,}" "$BUILD/bench/rma_bench" --sizes "$sizes" --mib "$mib" \
      --lat-iters "$iters" | sed "s/\$/\t$r/" >>"$tsv"
    [ "${PIPESTATUS[0]}" = 0 ] || { echo "rma_bench failed (round $r)"; exit 1; }
  done
  cat "$tsv"
  # per round: ratio = railnet / its reference; then the median over the rounds
  awk -F'\t' '
    function med(list,   n, a, i, j, t) {
      n = split(list, a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    # a figure perftest could not take (TCG: "inf", 0.00) leaves its round out
    $1 ~ /^ib_.*_bw$/ && $5 ~ /^[0-9.]+$/ && $5 + 0 > 0 { ref[$1 "," $2 "," $NF] = $5 }
    $1 ~ /^ib_.*_lat$/ && $6 ~ /^[0-9.]+$/ && $6 + 0 > 0 { ref[$1 "," $NF] = $6 }
    $1 == "rma_put_bw" || $1 == "rma_get_bw" {
      k = $1 " " $2; keys[k] = 1
      r = ref[($1 == "rma_put_bw" ? "ib_write_bw" : "ib_read_bw") "," $2 "," $NF]
      if (r) ratios[k] = ratios[k] " " $4 / r; mbps[k] = mbps[k] " " $4
    }
    $1 == "rma_putsignal_rtt" {
      k = "rma_putsignal_rtt 8"; keys[k] = 1
      w = ref["ib_write_lat," $NF]; a = ref["ib_atomic_lat," $NF]
      if (w && a) ratios[k] = ratios[k] " " $4 / (2 * w + a); mbps[k] = mbps[k] " " $4
    }
    END {
      print "== railnet RMA over perftest (median of the rounds; each ratio to its own round)"
      for (k in keys) {
        unit = k ~ /rtt/ ? "us typical" : "MB/s"
        what = k ~ /put_bw/ ? "ib_write_bw" : k ~ /get_bw/ ? "ib_read_bw" : "2 x ib_write_lat + ib_atomic_lat"
        printf "%-28s %10.2f %-10s  ratio to %s %.2f   (rounds:%s)\n", k " B", med(mbps[k]), unit, what,
          ratios[k] == "" ? 0 : med(ratios[k]), ratios[k] == "" ? " no reference" : ratios[k]
      }
    }' "$tsv" | sort
  exit 0
fi

SIZES="65536 1048576 8388608" MIB=32 LAT_ITERS=200 ROUNDS=3 OUT=$BUILD/softroce/bench-rma
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES=$2; shift 2 ;;
    --mib) MIB=$2; shift 2 ;;
    --lat-iters) LAT_ITERS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -o) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "rma.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$BUILD/bench/rma_bench" ] || { echo "rma.sh: $BUILD/bench/rma_bench is not built (make bench-build)" >&2; exit 2; }
for tool in ib_write_bw ib_read_bw ib_write_lat ib_atomic_lat ss; do
  command -v $tool >/dev/null || { echo "rma.sh: $tool not found (packages perftest, iproute2)" >&2; exit 2; }
done
self="$HERE/$(basename "$0")"
SOFTROCE_VM_TIMEOUT=$((ROUNDS * 240 + 120)) SOFTROCE_CMD_TIMEOUT=$((ROUNDS * 240)) \
  "$REPO/test/softroce/run-vm.sh" -q -o "$OUT" "rma=$self --in-vm '$SIZES' $MIB $LAT_ITERS $ROUNDS"
rc=$?
sed -n '/^== railnet RMA/,$p' "$OUT/rma.log" 2>/dev/null
[ $rc -eq 0 ] || { echo "rma.sh: the VM job failed (exit $rc):"; tail -20 "$OUT/rma.log"; }
exit $rc
