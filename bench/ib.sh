#!/bin/bash
# bench/ib.sh [-o DIR] [--sizes "S ..."] [--lat-iters N] [--mib-per-size M] [--rounds R] [--lat-sweep]
#
# railnet's IB transport through the plugin API (build/bin/railnet-perf dlopening
# build/lib/libnccl-net-railnet.so, RAILNET_TRANSPORT=ib) against perftest's ib_write_bw
# and ib_write_lat on the same soft-RoCE link, all in ONE VM boot (bench/softroce-perftest.sh
# runs perftest first, then this script's job inside the VM). Prints, per size, railnet's
# average bandwidth over ib_write_bw's, and railnet's 8-byte latency over ib_write_lat's.
# Under TCG the absolute numbers mean little; read the ratios.
#
# Both tools move data from rxe0 (client) to rxe1 (server). railnet-perf selects its device
# with NCCL_IB_HCA==rxe0 / ==rxe1 (exact match; each process then has one device, --dev 0);
# without it each process sees both devices, in discovery order.
#
# Options:
#   --sizes "S ..."      bandwidth sizes (default: 4096 65536 1048576 8388608)
#   --lat-iters N        8-byte ping-pongs (both tools; default 200)
#   --mib-per-size M     bytes per bandwidth size, MiB, for both tools (default 32): iterations
#                        are M MiB / size (8 .. 1000); railnet's warmup is a tenth of that.
#                        Both keep at most 4 MiB (2 .. 32 messages) in flight.
#   --rounds R           bandwidth rounds (default 3): rounds after the first run ib_write_bw
#                        again just before railnet; each round's ratio uses its own
#                        ib_write_bw, and the median over the rounds is printed per size
#   -o DIR               result directory (default: $RAILNET_BUILD/softroce/bench-ib)
#   --lat-sweep          also the latency of 8 B .. 64 KiB (powers of two) with NCCL's receive
#                        pattern, irecv buffers of 64 KiB (railnet-perf --recv-size 64K): the
#                        clear-to-send protocol (mean of a run before and one after the others), eager
#                        (the library's default, or --eager-size) and the peer plugin, with their
#                        ratios, and packets per 8-byte round trip of each that way
#   --eager-size N       RAILNET_IB_EAGER_SIZE of the eager rows (default: unset, the library's
#                        default of 4096; at most 8192). The bandwidth rows run at the library's
#                        defaults too (eager on: what a job gets). The latency rows named "default"
#                        and "lat" (and "railnet" packets and work) run with RAILNET_IB_EAGER_SIZE=0,
#                        the clear-to-send protocol (NCCL's protocol), so that eager / default
#                        compares the two protocols; above the eager size both are the same protocol.
#   --peer-plugin PATH   another plugin (e.g. libnccl-net-ibext.so, NVIDIA's IBext plugin from nccl-rdma-sharp-plugins, built outside this tree):
#                        its bandwidth (right after railnet's, each size and round), 8-byte latency and
#                        packets per round trip beside railnet's, same boot
# Results: DIR/perftest.tsv (see softroce-perftest.sh), DIR/railnet.tsv:
#   railnet_bw   SIZE  ITERS  BW_AVG_MBps  RATIO_TO_IB_WRITE_BW  ROUND
#   peer_bw      SIZE  ITERS  BW_AVG_MBps  RATIO_RAILNET_TO_PEER  ROUND   (--peer-plugin)
#   railnet_lat  SIZE  ITERS  T_TYPICAL_us  T_AVG_us  RATIO_TYPICAL  RATIO_AVG
#   pkts_per_rtt TOOL  PACKETS  (8-byte round trips: rxe's sent_pkts of both devices, data and
#                                acknowledgements, over a run of 2N round trips minus one of N)
#   eager_lat    8  ITERS  T_TYPICAL_us  T_AVG_us  (eager at both ends: the default or --eager-size)
#   pkts_per_rtt eager  PACKETS;  work_per_rtt eager  WRS  CQES  (the same, eager)
#   first_lat  8  COMMS  T_TYPICAL_us  T_AVG_us  PEER_TYPICAL_us  (a new comm's first message: one
#                                8-byte round trip over each of COMMS comm pairs, eager at both
#                                ends as eager_lat, the irecvs posted first as NCCL's proxy does;
#                                the peer the same way, 0 without --peer-plugin)
#   sweep_lat  SIZE  ITERS  DEFAULT_TYPICAL_us  EAGER_TYPICAL_us  PEER_TYPICAL_us  (--lat-sweep;
#                                64 KiB irecv buffers; 0: not measured)
#   sweep_pkts_per_rtt  default|eager|peer  PACKETS  (--lat-sweep: 8 bytes into 64 KiB buffers)
#   work_per_rtt railnet  WRS  CQES  (8-byte round trips: work requests posted and completions
#                                polled by both ends, from the INFO each comm logs at close)
#   railnet_failover_cost  SIZE  MIB  BW_OFF_MBps  BW_ON_MBps  RATIO_ON_TO_OFF
#   railnet_failover_phase  PHASE  MESSAGES  SECONDS  MBps  RATIO_TO_BEFORE
#   railnet_failover_notice  link_down|silent_path  NCCL_IB_TIMEOUT  SECONDS  DATA_QP_RETRY_SECONDS
#                                (fault to the failover WARN; the data QPs' retry time beside it)
# The last two, on a fused comm rxe0+rxe2 -> rxe1+rxe3 (a second veth pair added for them,
# bench/failover_bench, 1 MiB messages, 8 in flight): what NCCL_IB_RESILIENCY_PORT_FAILOVER=1
# costs when nothing fails (two alternating runs each; target: a ratio of 1, no measurable
# loss), and the bandwidth before, during and after a failover (veth2 down) and after the
# port's recovery (veth2 up; NCCL_IB_RESILIENCY_PORT_RECOVERY=1).
# Inside the VM this script is called back as: ib.sh --in-vm SIZES LAT_ITERS MIB ROUNDS SWEEP EAGER
set -u
# every run's output also goes to bench/results/<date>-ib.txt (bench/results.sh)
. "$(dirname "$0")/results.sh"
[ "${1:-}" = --in-vm ] || railnetBenchResults ib "$0" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BUILD=${RAILNET_BUILD:-$REPO/build}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
PERF=$BUILD/bin/railnet-perf
PLUGIN=$BUILD/lib/libnccl-net-railnet.so

# ------------------------------------------------------------------ inside the VM
# pin CPU COMMAND...: COMMAND on that CPU when there is more than one (taskset).
pin() {
  local cpu=$1
  shift
  if command -v taskset >/dev/null && [ "$(nproc)" -gt "$cpu" ]; then taskset -c "$cpu" "$@"; else "$@"; fi
}

# perf CPU DEVICE ARGS...: railnet-perf on one rxe device through the plugin, pinned to
# a vCPU like perftest's ends (softroce-perftest.sh: server vCPU 1, client vCPU 0).
perf() {
  local cpu=$1 dev=$2
  shift 2
  RAILNET_TRANSPORT=ib NCCL_IB_HCA="=$dev" NCCL_NET_PLUGIN= \
    pin "$cpu" "$PERF" --plugin "$PLUGIN" --dev 0 --handle-file "$SOFTROCE_OUT/railnet.handle" --timeout 120 \
    ${PERF_VERBOSE:+-v} "$@"
}

# pair ARGS...: server on device 1, client on device 0; prints the client's CSV rows.
pair() {
  local d0 d1 spid rc
  read -r d0 d1 <<<"$SOFTROCE_DEVS"
  rm -f "$SOFTROCE_OUT/railnet.handle"
  perf 1 "$d1" --server --csv >"$SOFTROCE_OUT/railnet.server" 2>&1 &
  spid=$!
  perf 0 "$d0" --client handle-file --csv "$@" >"$SOFTROCE_OUT/railnet.client" 2>&1
  rc=$?
  wait "$spid" || rc=1
  if [ $rc -ne 0 ]; then
    echo "railnet-perf $* failed; client then server output:" >&2
    cat "$SOFTROCE_OUT/railnet.client" "$SOFTROCE_OUT/railnet.server" >&2
    return 1
  fi
  grep -E '^(bw|lat),' "$SOFTROCE_OUT/railnet.client"
}

# packets both rxe devices sent so far (hw_counters/sent_pkts: requests and acknowledgements)
sent_pkts() {
  local d v s=0
  for d in $SOFTROCE_DEVS; do
    v=$(cat "/sys/class/infiniband/$d/ports/1/hw_counters/sent_pkts" 2>/dev/null) || v=0
    s=$((s + v))
  done
  echo "$s"
}

# pkts_per_rtt N COMMAND...: packets per round trip of COMMAND, which takes the round trip
# count as its last argument: (packets of a 2N run - packets of an N run) / N, so that setup,
# warmup and the handshake cancel out
pkts_per_rtt() {
  local n=$1 a b c
  shift
  a=$(sent_pkts)
  "$@" "$n" >/dev/null 2>&1 || return 1
  b=$(sent_pkts)
  "$@" $((2 * n)) >/dev/null 2>&1 || return 1
  c=$(sent_pkts)
  awk -v x=$((b - a)) -v y=$((c - b)) -v n="$n" 'BEGIN { printf "%.2f", (y - x) / n }'
}

# work_per_rtt N: work requests posted and completions polled per 8-byte round trip of
# railnet (both ends, both directions), from the INFO each IB comm logs when it closes
# ("... closed: M messages, W work requests posted, C completions polled"); a round trip
# is 4 messages counted (a send and a receive each way).
work_per_rtt() {
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET PERF_VERBOSE=1 pair --lat -s 8 --warmup 20 -n "$1" >/dev/null || return 1
  cat "$SOFTROCE_OUT/railnet.client" "$SOFTROCE_OUT/railnet.server" |
    sed -n 's/.* closed: \([0-9]*\) messages, \([0-9]*\) work requests posted, \([0-9]*\) completions polled.*/\1 \2 \3/p' |
    awk '{ m += $1; w += $2; c += $3 } END { if (m > 0) printf "%.2f %.2f", 4 * w / m, 4 * c / m; else print "n/a n/a" }'
}

perftest_lat() { "$HERE/softroce-perftest.sh" --in-vm lat 8 "$1"; }
sweep_lat() { pair --lat -s 8 --recv-size 64K --warmup 20 -n "$1"; }
sweep_peer_lat() { PLUGIN=$RAILNET_BENCH_PEER pair --lat -s 8 --recv-size 64K --warmup 20 -n "$1"; }

# lat_sweep ITERS TSV: the typical half round trip of 8 B .. 64 KiB into 64 KiB irecv buffers
# (NCCL's proxy posts its step buffers, larger than most messages): the default protocol,
# eager (eager_env: the library's default or --eager-size) and the peer plugin one after the other,
# then the packets per 8-byte round trip of each.
lat_sweep() {
  local iters=$1 tsv=$2 status=0 size d e p
  declare -A def eag peer
  local args="--lat -a --min-size 8 --max-size 65536 --recv-size 64K --warmup 20 -n $iters"
  # the order default, eager, peer, default: the default's figure is the mean of its two runs,
  # eager's and the peer's sit between them (the host's load drifts over minutes)
  declare -A def2
  while IFS=, read -r _ size _ _ _ d _; do def[$size]=$d; done < <(pair $args) || status=1
  while IFS=, read -r _ size _ _ _ e _; do eag[$size]=$e; done < <(eager_env; pair $args) || status=1
  if [ -n "${RAILNET_BENCH_PEER:-}" ]; then
    while IFS=, read -r _ size _ _ _ p _; do peer[$size]=$p; done < <(PLUGIN=$RAILNET_BENCH_PEER pair $args) || status=1
  fi
  while IFS=, read -r _ size _ _ _ d _; do def2[$size]=$d; done < <(pair $args) || status=1
  for size in "${!def[@]}"; do
    def[$size]=$(awk -v a="${def[$size]}" -v b="${def2[$size]:-${def[$size]}}" 'BEGIN { printf "%.2f", (a + b) / 2 }')
  done
  ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }'; }
  printf '  %-10s into 64 KiB irecv buffers; eager: RAILNET_IB_EAGER_SIZE=%s\n' sweep "$EAGER"
  [ "$EAGER" = default ] && printf '  %-10s (default: unset, the library default of 4096)\n' sweep
  printf '  %-10s %8s  %12s %12s %12s  %13s %11s %13s\n' sweep bytes default_us eager_us peer_us eager/default eager/peer default/peer
  for ((size = 8; size <= 65536; size *= 2)); do
    printf '  %-10s %8d  %12s %12s %12s  %13s %11s %13s\n' sweep "$size" "${def[$size]:-n/a}" "${eag[$size]:-n/a}" \
      "${peer[$size]:-n/a}" "$(ratio "${eag[$size]}" "${def[$size]}")" "$(ratio "${eag[$size]}" "${peer[$size]}")" \
      "$(ratio "${def[$size]}" "${peer[$size]}")"
    printf 'sweep_lat\t%s\t%s\t%s\t%s\t%s\n' "$size" "$iters" "${def[$size]:-0}" "${eag[$size]:-0}" "${peer[$size]:-0}" >>"$tsv"
  done
  d=$(pkts_per_rtt "$iters" sweep_lat) || { d=n/a; status=1; }
  e=$(eager_env; pkts_per_rtt "$iters" sweep_lat) || { e=n/a; status=1; }
  p=""
  [ -n "${RAILNET_BENCH_PEER:-}" ] && { p=$(pkts_per_rtt "$iters" sweep_peer_lat) || { p=n/a; status=1; }; }
  printf '  %-10s %8d  packets per round trip into 64 KiB buffers: default %s, eager %s%s\n' sweep 8 "$d" "$e" "${p:+, peer $p}"
  printf 'sweep_pkts_per_rtt\tdefault\t%s\nsweep_pkts_per_rtt\teager\t%s\n' "$d" "$e" >>"$tsv"
  [ -n "$p" ] && printf 'sweep_pkts_per_rtt\tpeer\t%s\n' "$p" >>"$tsv"
  return $status
}
railnet_lat() { pair --lat -s 8 --warmup 20 -n "$1"; }
# the eager rows' setting: --eager-size, or unset (the library's default)
eager_env() { if [ "$EAGER" = default ]; then unset RAILNET_IB_EAGER_SIZE; else export RAILNET_IB_EAGER_SIZE=$EAGER; fi; }

# first_lat TSV EAGER_TYPICAL: a new comm's first message (eager on at both ends): message k of
# FIRST_COMMS goes over comm pair k, each pair's only round trip (the pools warm after the
# first pairs); beside it the peer's, and the steady eager latency measured just before.
FIRST_COMMS=16 # (railnet-perf --comms takes at most 16)
first_lat() {
  local tsv=$1 steady=$2 row typ avg prow ptyp="" status=0
  eager_env
  row=$(pair --lat -s 8 --comms "$FIRST_COMMS" -n "$FIRST_COMMS" --warmup 0) || status=1
  export RAILNET_IB_EAGER_SIZE=0
  IFS=, read -r _ _ _ _ _ typ avg _ <<<"$row"
  if [ -n "${RAILNET_BENCH_PEER:-}" ]; then
    prow=$(PLUGIN=$RAILNET_BENCH_PEER pair --lat -s 8 --comms "$FIRST_COMMS" -n "$FIRST_COMMS" --warmup 0) || status=1
    IFS=, read -r _ _ _ _ _ ptyp _ _ <<<"$prow"
  fi
  printf '  %-10s %8d %8d  each the first of its comm pair: typical %.2f us, avg %.2f us; first / steady eager: typical %s%s\n' \
    first 8 "$FIRST_COMMS" "${typ:-0}" "${avg:-0}" \
    "$(awk -v a="${typ:-0}" -v b="$steady" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')" \
    "${ptyp:+; first / peer first: typical $(awk -v a="${typ:-0}" -v b="$ptyp" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')}"
  printf 'first_lat\t8\t%s\t%s\t%s\t%s\n' "$FIRST_COMMS" "${typ:-0}" "${avg:-0}" "${ptyp:-0}" >>"$tsv"
  return $status
}
peer_lat() { PLUGIN=$RAILNET_BENCH_PEER pair --lat -s 8 --warmup 20 -n "$1"; }

# The fused comm of the failover rows: rxe0+rxe2 -> rxe1+rxe3, over a second veth pair
# (veth2 198.18.1.1 <-> veth3 198.18.1.2, routed like the first: test/softroce/guest.sh).
SECOND_ROUTES="ip route replace 198.18.1.2/32 dev veth2 src 198.18.1.1 table 100 && \
ip route replace 198.18.1.1/32 dev veth3 src 198.18.1.2 table 100 && \
ip neigh replace 198.18.1.2 lladdr 02:00:c6:12:01:02 dev veth2 nud permanent && \
ip neigh replace 198.18.1.1 lladdr 02:00:c6:12:01:01 dev veth3 nud permanent"
second_pair_up() {
  local n
  ip link add veth2 address 02:00:c6:12:01:01 type veth peer name veth3 address 02:00:c6:12:01:02 || return 1
  ip addr add 198.18.1.1/32 dev veth2 && ip addr add 198.18.1.2/32 dev veth3 || return 1
  for n in veth2 veth3; do
    ip link set "$n" up || return 1
    echo 0 >"/proc/sys/net/ipv4/conf/$n/rp_filter"
    echo 1 >"/proc/sys/net/ipv4/conf/$n/accept_local"
  done
  sh -c "$SECOND_ROUTES" || return 1
  rdma link add rxe2 type rxe netdev veth2 && rdma link add rxe3 type rxe netdev veth3 || return 1
  wait_second_pair_active
}
# rxe2 and rxe3 ACTIVE with their IPv4 GID (20 s at most)
wait_second_pair_active() {
  local n i g
  for i in $(seq 200); do
    g=0
    for n in rxe2 rxe3; do
      grep -q ACTIVE "/sys/class/infiniband/$n/ports/1/state" 2>/dev/null &&
        grep -q '^0000:0000:0000:0000:0000:ffff:' "/sys/class/infiniband/$n/ports/1/gids/1" 2>/dev/null && g=$((g + 1))
    done
    [ $g -eq 2 ] && return 0
    sleep 0.1
  done
  return 1
}
second_pair_down() {
  rdma link delete rxe2 2>/dev/null
  rdma link delete rxe3 2>/dev/null
  ip link del veth2 2>/dev/null
  return 0
}

# fb ARGS...: bench/failover_bench on the fused comm, its sockets over lo
# (NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT from the caller, else 14 / 4)
fb() {
  RAILNET_TRANSPORT=ib NCCL_SOCKET_IFNAME=lo NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-14} \
    NCCL_IB_RETRY_CNT=${NCCL_IB_RETRY_CNT:-4} NCCL_NET_PLUGIN= \
    "$BUILD/bench/failover_bench" --plugin "$PLUGIN" "$@"
}

# notice_rows MIB TSV: how long port failover takes to notice a lost path, from the fault to
# its WARN, at NCCL_IB_TIMEOUT 14, 20 (NCCL's default) and 22 (NCCL_IB_RETRY_CNT 7, NCCL's):
# a link down (the port's event) and a path that drops every packet with its ports ACTIVE
# (the path probe; the data QPs alone would take their retry time, 4.096 us x 2^t x 8).
notice_rows() {
  local mib=$1 tsv=$2 t kind fault restore out secs qp status=0
  fb_built notice || return 0
  second_pair_up || { echo "notice: could not add the second veth pair and rxe2/rxe3" >&2; second_pair_down; return 1; }
  for t in 14 20 22; do
    qp=$(awk -v t="$t" 'BEGIN { printf "%.1f", 4.096e-6 * 2^t * 8 }')
    for kind in link_down silent_path; do
      if [ $kind = link_down ]; then fault="ip link set veth2 down" restore="ip link set veth2 up && $SECOND_ROUTES"
      else fault="tc qdisc add dev veth2 root netem loss 100%" restore="tc qdisc del dev veth2 root"; fi
      out=$(NCCL_IB_RESILIENCY_PORT_FAILOVER=1 NCCL_IB_TIMEOUT=$t NCCL_IB_RETRY_CNT=7 \
            fb --notice --mib "$mib" --fault "$fault" --restore "$restore") || status=1
      secs=$(sed -n 's/^notice //p' <<<"$out")
      printf '  %-10s %-12s NCCL_IB_TIMEOUT=%-2s: noticed %s s after the fault (the data QPs alone: %s s)\n' \
        notice "$kind" "$t" "${secs:-never}" "$qp"
      printf 'railnet_failover_notice\t%s\t%s\t%s\t%s\n' "$kind" "$t" "${secs:-never}" "$qp" >>"$tsv"
      wait_second_pair_active || { echo "notice: rxe2/rxe3 did not come back after $kind" >&2; status=1; break 2; }
    done
  done
  second_pair_down
  return $status
}

# failover_rows MIB TSV: on the fused comm, (1) 1 MiB bandwidth with
# NCCL_IB_RESILIENCY_PORT_FAILOVER=0 and =1 when nothing fails, alternating (0 1 0 1) so that
# drift hits both alike: the ratio of the means; (2) the phases of one run with failover and
# recovery on: before, during (veth2 goes down as it starts), after (on rxe0 alone),
# recovering (veth2 up again, until railnet says rxe2 carries traffic again), recovered.
# fb_built: whether bench/failover_bench is there (make bench-build); says so when it is not,
# so that the failover rows are left out rather than printed with no figures
fb_built() {
  [ -x "$BUILD/bench/failover_bench" ] && return 0
  echo "  SKIP: $1: $BUILD/bench/failover_bench is not built (make bench-build)"
  return 1
}

failover_rows() {
  local mib=$1 tsv=$2 r f row mbps sum0=0 sum1=0 name n secs before="" out
  fb_built failover || return 0
  second_pair_up || { echo "failover: could not add the second veth pair and rxe2/rxe3" >&2; second_pair_down; return 1; }
  for r in 1 2; do
    for f in 0 1; do
      row=$(NCCL_IB_RESILIENCY_PORT_FAILOVER=$f fb --plain --mib "$mib") || { second_pair_down; return 1; }
      read -r _ _ _ _ mbps <<<"$(grep '^phase steady' <<<"$row")"
      if [ "$f" = 0 ]; then sum0=$(awk -v a="$sum0" -v b="$mbps" 'BEGIN { print a + b }')
      else sum1=$(awk -v a="$sum1" -v b="$mbps" 'BEGIN { print a + b }'); fi
    done
  done
  read -r off on ratio <<<"$(awk -v a="$sum0" -v b="$sum1" 'BEGIN { r = "n/a"; if (a > 0) r = sprintf("%.2f", b / a); printf "%.2f %.2f %s", a / 2, b / 2, r }')"
  printf '  %-10s %8d %8d  fused rxe0+rxe2: failover off %.2f MB/s, on %.2f MB/s (nothing fails): ratio on/off %s\n' \
    failover 1048576 "$mib" "$off" "$on" "$ratio"
  printf 'railnet_failover_cost\t1048576\t%s\t%s\t%s\t%s\n' "$mib" "$off" "$on" "$ratio" >>"$tsv"
  out=$(NCCL_IB_RESILIENCY_PORT_FAILOVER=1 NCCL_IB_RESILIENCY_PORT_RECOVERY=1 \
        NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL=100 \
        fb --mib "$mib" --fault "ip link set veth2 down" --restore "ip link set veth2 up && $SECOND_ROUTES")
  r=$?
  while read -r _ name n secs mbps; do
    [ -n "$before" ] || before=$mbps
    ratio=$(awk -v a="$mbps" -v b="$before" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
    printf '  %-10s %-10s %5d MiB in %7.2f s: %8.2f MB/s, ratio to before %s\n' failover "$name" "$n" "$secs" "$mbps" "$ratio"
    printf 'railnet_failover_phase\t%s\t%s\t%s\t%s\t%s\n' "$name" "$n" "$secs" "$mbps" "$ratio" >>"$tsv"
  done < <(grep '^phase ' <<<"$out")
  second_pair_down
  return $r
}

in_vm() {
  local sizes=$1 latIters=$2 mib=$3 rounds=${4:-1} sweep=${5:-0} size iters warm window row status=0 tsv=$SOFTROCE_OUT/railnet.tsv
  EAGER=${6:-default}
  eager_env # the bandwidth rows at the library's defaults (or --eager-size)
  local pt=$SOFTROCE_OUT/perftest.tsv r prow pavg pratio
  declare -A ratios pratios
  : >"$tsv"
  [ -x "$PERF" ] && [ -f "$PLUGIN" ] || { echo "build $PERF and $PLUGIN first (make)" >&2; return 1; }
  echo "railnet-perf through $(basename "$PLUGIN"), RAILNET_TRANSPORT=ib: client ${SOFTROCE_DEVS% *} -> server ${SOFTROCE_DEVS#* }"
  printf '  %-10s %5s %8s %8s %14s %14s %8s\n' test round bytes iters railnet_MBps ib_write_bw ratio
  for ((r = 1; r <= rounds; r++)); do
    # each round after the first measures ib_write_bw again right before railnet: the ratio
    # of a round compares two runs a few seconds apart
    if [ "$r" -gt 1 ]; then
      before=$(grep -c '^ib_write_bw' "$pt" 2>/dev/null)
      "$HERE/softroce-perftest.sh" --in-vm bwn "$sizes" "$mib" >"$SOFTROCE_OUT/perftest.round$r" 2>&1 || status=1
      if [ "$(grep -c '^ib_write_bw' "$pt" 2>/dev/null)" -le "${before:-0}" ]; then
        echo "  round $r: ib_write_bw gave no result (see $SOFTROCE_OUT/perftest.round$r); round skipped" >&2
        status=1
        continue
      fi
    fi
    for size in $sizes; do
      iters=$(( (mib << 20) / size )); [ $iters -lt 8 ] && iters=8; [ $iters -gt 1000 ] && iters=1000
      warm=$(( iters / 10 )); [ $warm -lt 1 ] && warm=1
      # as softroce-perftest.sh's ib_write_bw -t: at most 4 MiB in flight, 2 .. 32 messages
      window=$(( (4 << 20) / size )); [ $window -lt 2 ] && window=2; [ $window -gt 32 ] && window=32
      row=$(pair --bw -s "$size" -n "$iters" --warmup "$warm" --window "$window") || { status=1; continue; }
      IFS=, read -r _ _ _ _ avg _ <<<"$row"
      # the newest ib_write_bw line of this size: this round's
      ref=$(awk -F'\t' -v s="$size" '$1 == "ib_write_bw" && $2 == s { v = $5 } END { print v }' "$pt" 2>/dev/null)
      ratio=$(awk -v a="$avg" -v b="${ref:-0}" 'BEGIN { if (b > 0 && b < 1e12) printf "%.2f", a / b; else print "n/a" }')
      printf '  %-10s %5d %8d %8d %14.2f %14s %8s\n' bw "$r" "$size" "$iters" "$avg" "${ref:-none}" "$ratio"
      printf 'railnet_bw\t%s\t%s\t%s\t%s\t%s\n' "$size" "$iters" "$avg" "$ratio" "$r" >>"$tsv"
      ratios[$size]+="$ratio "
      if [ -n "${RAILNET_BENCH_PEER:-}" ]; then # the peer right after railnet, same settings
        prow=$(PLUGIN=$RAILNET_BENCH_PEER pair --bw -s "$size" -n "$iters" --warmup "$warm" --window "$window") || { status=1; continue; }
        IFS=, read -r _ _ _ _ pavg _ <<<"$prow"
        pratio=$(awk -v a="$avg" -v b="${pavg:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
        printf '  %-10s %5d %8d %8d %14.2f %14s %8s  (railnet / peer)\n' peer_bw "$r" "$size" "$iters" "$pavg" "" "$pratio"
        printf 'peer_bw\t%s\t%s\t%s\t%s\t%s\n' "$size" "$iters" "$pavg" "$pratio" "$r" >>"$tsv"
        pratios[$size]+="$pratio "
      fi
    done
  done
  median() { echo "$@" | tr ' ' '\n' | grep -v n/a | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  if [ "$rounds" -gt 1 ]; then
    for size in $sizes; do
      printf '  %-10s %5s %8d  median ratio %s over rounds (%s)\n' bw all "$size" "$(median ${ratios[$size]})" \
        "$(echo ${ratios[$size]})"
      [ -n "${pratios[$size]:-}" ] && printf '  %-10s %5s %8d  median railnet / peer %s over rounds (%s)\n' peer_bw all \
        "$size" "$(median ${pratios[$size]})" "$(echo ${pratios[$size]})"
    done
  fi
  export RAILNET_IB_EAGER_SIZE=0 # the clear-to-send protocol, but in the eager rows
  # ib_write_lat again right before railnet's ping-pong (with several rounds, the first
  # measurement is minutes old by now); the newest line is the reference
  if [ "$rounds" -gt 1 ]; then
    "$HERE/softroce-perftest.sh" --in-vm lat 8 "$latIters" >/dev/null 2>&1 || status=1
  fi
  failover_rows "$mib" "$tsv" || status=1
  notice_rows 8 "$tsv" || status=1
  row=$(pair --lat -s 8 -n "$latIters" --warmup 20) || return 1
  IFS=, read -r _ _ _ _ _ typ avg _ <<<"$row"
  read -r rtyp ravg <<<"$(awk -F'\t' '$1 == "ib_write_lat" && $2 == 8 { t = $6; a = $7 } END { print t, a }' "$pt" 2>/dev/null)"
  rt=$(awk -v a="$typ" -v b="${rtyp:-0}" 'BEGIN { if (b > 0 && b < 1e12) printf "%.2f", a / b; else print "n/a" }')
  ra=$(awk -v a="$avg" -v b="${ravg:-0}" 'BEGIN { if (b > 0 && b < 1e12) printf "%.2f", a / b; else print "n/a" }')
  printf '  %-10s %8d %8d  typical %.2f us (ib_write_lat %s, ratio %s); avg %.2f us (ib_write_lat %s, ratio %s)\n' \
    lat 8 "$latIters" "$typ" "${rtyp:-none}" "$rt" "$avg" "${ravg:-none}" "$ra"
  printf 'railnet_lat\t8\t%s\t%s\t%s\t%s\t%s\n' "$latIters" "$typ" "$avg" "$rt" "$ra" >>"$tsv"
  # what a round trip costs on the wire (both tools again, after the timed runs)
  local pp pr pe=""
  if [ -n "${RAILNET_BENCH_PEER:-}" ]; then
    # the peer's ping-pong right after railnet's, and railnet's again after it: the ratio uses
    # the mean of railnet's two runs
    local prow rrow ptyp pavg rtyp2 ravg2
    prow=$(PLUGIN=$RAILNET_BENCH_PEER pair --lat -s 8 -n "$latIters" --warmup 20) || status=1
    rrow=$(pair --lat -s 8 -n "$latIters" --warmup 20) || status=1
    IFS=, read -r _ _ _ _ _ ptyp pavg _ <<<"$prow"
    IFS=, read -r _ _ _ _ _ rtyp2 ravg2 _ <<<"$rrow"
    printf '  %-10s %8d %8d  typical %.2f us, avg %.2f us (%s); railnet / peer: typical %s, avg %s\n' peer 8 \
      "$latIters" "${ptyp:-0}" "${pavg:-0}" "$(basename "$RAILNET_BENCH_PEER")" \
      "$(awk -v a="$typ" -v b="${rtyp2:-0}" -v p="${ptyp:-0}" 'BEGIN { if (p > 0) printf "%.2f", (a + b) / 2 / p; else print "n/a" }')" \
      "$(awk -v a="$avg" -v b="${ravg2:-0}" -v p="${pavg:-0}" 'BEGIN { if (p > 0) printf "%.2f", (a + b) / 2 / p; else print "n/a" }')"
    printf 'peer_lat\t8\t%s\t%s\t%s\n' "$latIters" "${ptyp:-0}" "${pavg:-0}" >>"$tsv"
  fi
  pp=$(pkts_per_rtt "$latIters" perftest_lat) || { pp=n/a; status=1; }
  pr=$(pkts_per_rtt "$latIters" railnet_lat) || { pr=n/a; status=1; }
  if [ -n "${RAILNET_BENCH_PEER:-}" ]; then
    pe=$(pkts_per_rtt "$latIters" peer_lat) || { pe=n/a; status=1; }
    printf 'pkts_per_rtt\tpeer\t%s\n' "$pe" >>"$tsv"
  fi
  printf '  %-10s %8d  packets per round trip (rxe sent_pkts, both devices): railnet %s, ib_write_lat %s%s\n' \
    pkts 8 "$pr" "$pp" "${pe:+, peer $pe}"
  printf 'pkts_per_rtt\trailnet\t%s\npkts_per_rtt\tib_write_lat\t%s\n' "$pr" "$pp" >>"$tsv"
  local wc
  wc=$(work_per_rtt "$latIters") || { wc="n/a n/a"; status=1; }
  read -r ww cc <<<"$wc"
  printf '  %-10s %8d  per round trip (both ends): railnet %s work requests posted, %s completions polled\n' \
    work 8 "$ww" "$cc"
  printf 'work_per_rtt\trailnet\t%s\t%s\n' "$ww" "$cc" >>"$tsv"
  # eager small messages (eager_env at both ends, src/transport/net_ib/eager/eager.h): latency
  # right after the clear-to-send protocol's and the peer's, then its packets and work
  local erow etyp eavg ep ewc ew ec
  eager_env
  erow=$(pair --lat -s 8 -n "$latIters" --warmup 20) || status=1
  IFS=, read -r _ _ _ _ _ etyp eavg _ <<<"$erow"
  ep=$(pkts_per_rtt "$latIters" railnet_lat) || { ep=n/a; status=1; }
  ewc=$(work_per_rtt "$latIters") || { ewc="n/a n/a"; status=1; }
  read -r ew ec <<<"$ewc"
  export RAILNET_IB_EAGER_SIZE=0
  printf '  %-10s %8d %8d  typical %.2f us, avg %.2f us; eager / ib_write_lat: typical %s; eager / default: typical %s%s\n' \
    eager 8 "$latIters" "${etyp:-0}" "${eavg:-0}" \
    "$(awk -v a="${etyp:-0}" -v b="${rtyp:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')" \
    "$(awk -v a="${etyp:-0}" -v b="$typ" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')" \
    "${ptyp:+; eager / peer: typical $(awk -v a="${etyp:-0}" -v b="$ptyp" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')}"
  printf '  %-10s %8d  eager, per round trip: %s packets, %s work requests posted, %s completions polled\n' \
    eager 8 "$ep" "$ew" "$ec"
  printf 'eager_lat\t8\t%s\t%s\t%s\npkts_per_rtt\teager\t%s\nwork_per_rtt\teager\t%s\t%s\n' \
    "$latIters" "${etyp:-0}" "${eavg:-0}" "$ep" "$ew" "$ec" >>"$tsv"
  first_lat "$tsv" "${etyp:-0}" || status=1
  if [ "$sweep" = 1 ]; then lat_sweep "$latIters" "$tsv" || status=1; fi
  return $status
}

if [ "${1:-}" = --in-vm ]; then
  shift
  in_vm "$@"
  exit
fi

# ------------------------------------------------------------------ on the host
SIZES="4096 65536 1048576 8388608" LAT_ITERS=200 MIB=32 ROUNDS=3 SWEEP=0 EAGER=default
OUT=$BUILD/softroce/bench-ib
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES=$2; shift 2 ;;
    --lat-iters) LAT_ITERS=$2; shift 2 ;;
    --mib-per-size) MIB=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2
      case "$ROUNDS" in ''|*[!0-9]*|0) echo "bench/ib.sh: --rounds needs a number >= 1" >&2; exit 2 ;; esac ;;
    -o) OUT=$2; shift 2 ;;
    --lat-sweep) SWEEP=1; shift ;;
    --eager-size) EAGER=$2; shift 2
      case "$EAGER" in ''|*[!0-9]*|0) echo "bench/ib.sh: --eager-size needs 1 .. 8192" >&2; exit 2 ;; esac ;;
    --peer-plugin) RAILNET_BENCH_PEER=$(readlink -f "$2"); shift 2
      [ -f "$RAILNET_BENCH_PEER" ] || { echo "bench/ib.sh: --peer-plugin $2: no such file" >&2; exit 2; }
      export RAILNET_BENCH_PEER ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/ib.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for f in "$PERF" "$PLUGIN"; do
  [ -e "$f" ] || { echo "bench/ib.sh: $f is missing; run make first" >&2; exit 2; }
done
self="$HERE/$(basename "$0")"
# qemu's two vCPUs need two host cores: on a busy host the figures (ratios too) swing by 3x
load() { echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) ($1)"; }
load before
"$HERE/softroce-perftest.sh" -o "$OUT" --bw-sizes "$SIZES" --lat-sizes 8 --bw-mib "$MIB" \
  --lat-iters "$LAT_ITERS" "railnet_ib=$self --in-vm '$SIZES' $LAT_ITERS $MIB $ROUNDS $SWEEP $EAGER"
rc=$?
load after
exit $rc
