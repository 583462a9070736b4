#!/bin/bash
# bench/softroce-perftest.sh [options] [NAME=COMMAND ...]
#
# perftest's ib_write_bw and ib_write_lat between the two soft-RoCE devices (rxe0 ->
# rxe1 over the veth pair, see test/softroce/run-vm.sh), in one VM boot together with
# any further NAME=COMMAND jobs (e.g. railnet's own benchmark), so that ratios to the
# perftest figures are taken on the same emulated link in the same run. Under TCG the
# absolute numbers mean little; the ratios are what to read.
#
# Options:
#   --bw-sizes "S ..."    ib_write_bw message sizes   (default: 4096 65536 1048576)
#   --lat-sizes "S ..."   ib_write_lat message sizes  (default: 8 4096 65536)
#   --bw-seconds N        ib_write_bw -D, seconds per size (default: 2)
#   --bw-mib M            ib_write_bw -n instead of -D: M MiB per size, as M MiB / size
#                         iterations (8 .. 1000); under TCG -D can report 0.00 MB/s
#   --lat-iters N         ib_write_lat -n (default: 200)
#   --read-bw             also ib_read_bw at the bandwidth sizes (same length and depth)
#   --atomic-lat          also ib_atomic_lat (fetch-and-add, 8 B; the same -n)
#   -o DIR                result directory (default: $RAILNET_BUILD/softroce/bench)
# Results: DIR/perftest.tsv, one line per measurement, tab-separated:
#   ib_write_bw   SIZE  ITERS  BW_PEAK_MBps  BW_AVG_MBps  (peak is 0 in perftest's -D mode)
#   ib_write_lat  SIZE  ITERS  T_MIN_us  T_MAX_us  T_TYPICAL_us  T_AVG_us
#   ib_read_bw, ib_atomic_lat: as ib_write_bw, ib_write_lat (a read's and an atomic's
#                 latency is its round trip; a write's is half a ping-pong)
# and DIR/NAME.log for the extra jobs, which run after perftest and can read that file
# ($SOFTROCE_OUT/perftest.tsv) to print their ratios.
# Inside the VM this script is called back as: softroce-perftest.sh --in-vm bw|bwn|lat SIZES N
# [TOOL] (bw: N seconds per size, bwn: N MiB per size; at most 4 MiB in flight; TOOL:
# ib_write_bw / ib_write_lat by default, or ib_read_bw / ib_atomic_lat).
set -u
# every run's output also goes to bench/results/<date>-softroce-perftest.txt (bench/results.sh)
. "$(dirname "$0")/results.sh"
[ "${1:-}" = --in-vm ] || railnetBenchResults softroce-perftest "$0" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

# ------------------------------------------------------------------ inside the VM
wait_listen() { # port: until a server listens on it (10 s)
  local i
  for ((i = 0; i < 100; i++)); do
    [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  return 1
}

# pin CPU COMMAND...: COMMAND on that CPU when there is more than one (taskset).
pin() {
  local cpu=$1
  shift
  if command -v taskset >/dev/null && [ "$(nproc)" -gt "$cpu" ]; then taskset -c "$cpu" "$@"; else "$@"; fi
}

# run_pair TOOL SIZE PORT LENGTH...: server on device 1, client on device 0 (the client
# writes: data flows device 0 -> device 1), both with the LENGTH options (-n N or -D S);
# prints the client's result row (the line after the "#bytes" header).
run_pair() {
  local tool=$1 size=$2 port=$3 d0 d1 g0 g1 a1 spid log rc
  shift 3
  read -r d0 d1 <<<"$SOFTROCE_DEVS"
  read -r g0 g1 <<<"$SOFTROCE_GID_INDEXES"
  read -r _ a1 <<<"$SOFTROCE_ADDRS"
  log=$SOFTROCE_OUT/$tool.$size
  # each end pinned to its own vCPU: perftest times with rdtsc, and TCG's vCPUs' TSCs
  # disagree, so a process that migrates measures garbage (0.00 MB/s, inf or ms latencies)
  pin 1 "$tool" -d "$d1" -x "$g1" -s "$size" "$@" -F -p "$port" >"$log.server" 2>&1 &
  spid=$!
  if ! wait_listen "$port"; then
    echo "$tool -s $size: the server on $d1 did not listen on port $port" >&2
    kill "$spid" 2>/dev/null; cat "$log.server" >&2; return 1
  fi
  pin 0 "$tool" -d "$d0" -x "$g0" -s "$size" "$@" -F -p "$port" "$a1" >"$log.client" 2>&1
  rc=$?
  wait "$spid" || rc=1
  if [ $rc -ne 0 ]; then
    echo "$tool -s $size failed; client then server output:" >&2
    cat "$log.client" "$log.server" >&2
    return 1
  fi
  awk '/^ *#bytes/ { h = 1; next } h && NF > 2 && $1 ~ /^[0-9]+$/ { print; exit }' "$log.client"
}

in_vm() {
  local kind=$1 sizes=$2 n=$3 tool=${4:-} size row depth iters length port=18515 status=0
  [ -n "$tool" ] || { tool=ib_write_bw; [ "$kind" = lat ] && tool=ib_write_lat; }
  [ "$tool" = ib_read_bw ] && port=18715
  [ "$tool" = ib_atomic_lat ] && port=18815
  for size in $sizes; do
    port=$((port + 1))
    if [ "$kind" = bw ] || [ "$kind" = bwn ]; then
      # perftest keeps 128 writes in flight by default: 128 MiB of 1 MiB messages take
      # longer than the whole run on an emulated link, and it then reports 0.00 MB/s.
      depth=$(( (4 << 20) / size )); [ $depth -lt 2 ] && depth=2; [ $depth -gt 128 ] && depth=128
      if [ "$kind" = bw ]; then
        length=(-D "$n")
      else # bwn: N MiB per size as -n iterations (8 .. 1000); -D can report 0.00 MB/s under TCG
        iters=$(( (n << 20) / size )); [ $iters -lt 8 ] && iters=8; [ $iters -gt 1000 ] && iters=1000
        [ $depth -gt $iters ] && depth=$iters
        length=(-n "$iters")
      fi
      row=$(run_pair "$tool" "$size" "$port" "${length[@]}" -t "$depth") || { status=1; continue; }
      set -- $row  # bytes iterations peak average msgrate
      printf '%s\t%s\t%s\t%s\t%s\n' "$tool" "$1" "$2" "$3" "$4" | tee -a "$SOFTROCE_OUT/perftest.tsv"
    else
      row=$(run_pair "$tool" "$size" "$port" -n "$n") || { status=1; continue; }
      set -- $row  # bytes iterations t_min t_max t_typical t_avg ...
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$1" "$2" "$3" "$4" "$5" "$6" |
        tee -a "$SOFTROCE_OUT/perftest.tsv"
    fi
  done
  return $status
}

if [ "${1:-}" = --in-vm ]; then
  shift
  in_vm "$@"
  exit
fi

# ------------------------------------------------------------------ on the host
BW_SIZES="4096 65536 1048576" LAT_SIZES="8 4096 65536" BW_SECONDS=2 BW_MIB= LAT_ITERS=200 READ_BW=0 ATOMIC_LAT=0
OUT=${RAILNET_BUILD:-$REPO/build}/softroce/bench
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bw-sizes) BW_SIZES=$2; shift 2 ;;
    --lat-sizes) LAT_SIZES=$2; shift 2 ;;
    --bw-seconds) BW_SECONDS=$2; shift 2 ;;
    --bw-mib) BW_MIB=$2; shift 2 ;;
    --lat-iters) LAT_ITERS=$2; shift 2 ;;
    --read-bw) READ_BW=1; shift ;;
    --atomic-lat) ATOMIC_LAT=1; shift ;;
    -o) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *=*) extra+=("$1"); shift ;;
    *) echo "softroce-perftest: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for tool in ib_write_bw ib_write_lat ss; do
  command -v $tool >/dev/null || { echo "softroce-perftest: $tool not found (packages perftest, iproute2)" >&2; exit 2; }
done
self="$HERE/$(basename "$0")"
bw_job="bw '$BW_SIZES' $BW_SECONDS"
[ -n "$BW_MIB" ] && bw_job="bwn '$BW_SIZES' $BW_MIB"
jobs=("perftest_bw=$self --in-vm $bw_job" "perftest_lat=$self --in-vm lat '$LAT_SIZES' $LAT_ITERS")
[ $READ_BW = 1 ] && jobs+=("perftest_read=$self --in-vm $bw_job ib_read_bw")
[ $ATOMIC_LAT = 1 ] && jobs+=("perftest_atomic=$self --in-vm lat 8 $LAT_ITERS ib_atomic_lat")
"$REPO/test/softroce/run-vm.sh" -o "$OUT" "${jobs[@]}" "${extra[@]}"
rc=$?
[ $rc -eq 2 ] && exit 2
for j in "${jobs[@]}"; do
  j=${j%%=*}
  [ "$(cat "$OUT/$j.rc" 2>/dev/null)" = 0 ] || { echo "== $j failed:"; cat "$OUT/$j.log"; }
done
devs=$(sed -n 's/^rxe ok //p' "$OUT/status")
echo "== perftest on soft-RoCE (${devs% *} -> ${devs#* }; under TCG compare ratios, not absolutes)"
awk -F'\t' '
  $1 ~ /_bw$/  { printf "  %-13s %8d B  %6d iters  avg %8.2f MB/s\n", $1, $2, $3, $5 }
  $1 ~ /_lat$/ { printf "  %-13s %8d B  %6d iters  avg %8.2f us    (min %.2f, typical %.2f)\n", $1, $2, $3, $7, $4, $6 }
' "$OUT/perftest.tsv" 2>/dev/null
for j in "${extra[@]}"; do
  name=${j%%=*}
  echo "== $name (exit $(cat "$OUT/$name.rc" 2>/dev/null || echo "none"))"
  cat "$OUT/$name.log" 2>/dev/null
done
echo "results: $OUT/perftest.tsv"
exit $rc
