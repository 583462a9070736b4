#!/bin/bash
# bench/socket.sh: the Socket transport against references measured in the same run.
#   1. unidirectional bandwidth through the plugin API (build/bench/socket_bench, the
#      receiver in a child process) vs iperf3 with the same number of TCP streams, 4 KiB ..
#      64 MiB messages, 8 in flight (NCCL's steps per channel) from one buffer per side (as
#      iperf3 and ib_write_bw reuse theirs; BUFS=8 gives each message in flight its own, and
#      copies from and to memory that is not in cache cost more), in ROUNDS rounds that
#      alternate iperf3 and every variant (medians: the machine is shared): 1 stream without helper
#      threads (NCCL's default), 1 x 1, 2 x 2 and 2 x 8 (NCCL's automatic choice on AWS ENA)
#      helper threads x sockets; on loopback and over a veth pair between two network
#      namespaces (root); variants: zc0 (zero-copy off, RAILNET_SOCKET_ZEROCOPY=0, as the
#      default's automatic mode ends up where the kernel copies; payloads up to
#      RAILNET_SOCKET_CTRL_PAYLOAD on the control socket, the default), zc1 (zero-copy sends
#      forced on), nccl (zero-copy off, NCCL's layout: RAILNET_SOCKET_CTRL_PAYLOAD=0 and
#      RAILNET_SOCKET_MIN_TASKSIZE=0);
#      A second reference, tcp (socket_bench tcp), is the kernel's TCP with the buffers the
#      transport uses: the same streams, one thread per side as iperf3, each message split
#      over the streams, each stream walking its share (at least iperf3's 128 KiB) of one
#      buffer per side; from messages larger than the cache it pays for cold memory as the
#      transport does, where iperf3's 128 KiB stays in cache;
#   2. the goals of the helper threads, from that table (against both references);
#   3. 8-byte ping-pong through isend/irecv/test vs a raw TCP ping-pong between the same
#      two processes;
#   4. instructions per 8-byte round trip (valgrind --tool=callgrind), repeatable.
# Only ratios mean something on a shared machine. Run: make bench
#   CONFIGS="0x0 2x2"  VARIANTS="zc0 zc1 nccl"  PATHS="lo veth"  SIZES="..."  SECONDS_PER=1  INFLIGHT=8
#   BUFS=1  ROUNDS=3
set -u
# every run's output also goes to bench/results/<date>-socket.txt (bench/results.sh)
. "$(dirname "$0")/results.sh"
railnetBenchResults socket "$0" "$@"
BUILD=${BUILD:-build}
export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SIZES=${SIZES:-"4096 65536 1048576 4194304 67108864"}
SECONDS_PER=${SECONDS_PER:-1}
INFLIGHT=${INFLIGHT:-8}
BUFS=${BUFS:-1}
ROUNDS=${ROUNDS:-3}
CONFIGS=${CONFIGS:-"0x0 1x1 2x2 2x8"}
VARIANTS=${VARIANTS:-"zc0 zc1 nccl"}
PATHS=${PATHS:-"lo veth"}
B="$BUILD/bench/socket_bench"
PORT=$((5200 + $$ % 500))
RESULTS=$(mktemp)
ROUNDS_OUT=$(mktemp)
NSA=rnb-a-$$ NSB=rnb-b-$$
cleanup() { rm -f "$RESULTS" "$ROUNDS_OUT"; ip netns del $NSA 2>/dev/null; ip netns del $NSB 2>/dev/null; }
trap cleanup EXIT

iperf_mbps() { # HOSTADDR STREAMS [netns of the client] -> MB/s (10^6 bytes) of a 2 s run
  local host=$1 streams=$2 ns=${3:-}
  local run=""
  [ -n "$ns" ] && run="ip netns exec $ns"
  $run iperf3 -c "$host" -p "$PORT" -P "$streams" -t 2 -f m 2>/dev/null |
    awk '/receiver/ && ($1 == "[SUM]" || NF > 0) {v=$(NF-2); u=$(NF-1)} END {if (u ~ /Gbits/) v*=1000; printf "%.1f\n", v/8}'
}

veth_up() {
  [ "$(id -u)" -eq 0 ] && ip netns add $NSA 2>/dev/null || return 1
  ip netns add $NSB
  ip link add rnbva type veth peer name rnbvb
  ip link set rnbva netns $NSA; ip link set rnbvb netns $NSB
  ip -n $NSA addr add 198.18.20.1/24 dev rnbva; ip -n $NSB addr add 198.18.20.2/24 dev rnbvb
  ip -n $NSA link set rnbva up; ip -n $NSB link set rnbvb up
  ip -n $NSA link set lo up; ip -n $NSB link set lo up
  sleep 1
}

echo "== 1. bandwidth: railnet Socket (plugin API, $INFLIGHT messages in flight, $BUFS buffer(s) per side) vs iperf3, same stream count"
echo "   $ROUNDS rounds, each: iperf3, tcp (kernel TCP, same streams and buffers), then every variant;"
echo "   the table gives medians (MB/s), the ratios of the medians to iperf3's and to tcp's at the same size, and every round"
for path in $PATHS; do
  if [ "$path" = veth ]; then
    if ! veth_up; then echo "SKIP: veth: needs root and network namespaces"; continue; fi
    host=198.18.20.1 ifname=rnbv client="ip netns exec $NSB" recvns="--recv-netns $NSA" iperfns=$NSB
    server="ip netns exec $NSA"
  else
    host=127.0.0.1 ifname=lo client="" recvns="" iperfns="" server=""
  fi
  for cfg in $CONFIGS; do
    nt=${cfg%x*} ns=${cfg#*x}
    streams=$((nt * ns)); [ "$streams" -eq 0 ] && streams=1
    : > "$ROUNDS_OUT"
    for round in $(seq "$ROUNDS"); do
      $server iperf3 -s -p "$PORT" -D -1 >/dev/null 2>&1; sleep 0.3
      echo "iperf3 0 $(iperf_mbps $host "$streams" $iperfns)" >> "$ROUNDS_OUT"
      $client "$B" tcp --streams "$streams" --host "$host" --seconds "$SECONDS_PER" --sizes "$SIZES" $recvns |
        awk 'NR > 1 {print "tcp", $1, $3}' >> "$ROUNDS_OUT"
      for v in $VARIANTS; do
        case $v in
          zc1) vars="RAILNET_SOCKET_ZEROCOPY=1" ;;
          nccl) vars="RAILNET_SOCKET_ZEROCOPY=0 RAILNET_SOCKET_CTRL_PAYLOAD=0 RAILNET_SOCKET_MIN_TASKSIZE=0" ;;
          *) vars="RAILNET_SOCKET_ZEROCOPY=0" ;;
        esac
        [ "$nt" = 0 ] && [ "$v" = nccl ] && continue # no data sockets: the same as zc0
        $client env NCCL_SOCKET_IFNAME=$ifname NCCL_SOCKET_NTHREADS=$nt NCCL_NSOCKS_PERTHREAD=$ns $vars "$B" bw \
          --seconds "$SECONDS_PER" --sizes "$SIZES" --inflight "$INFLIGHT" --bufs "$BUFS" $recvns |
          awk -v v="$v" 'NR > 1 {print v, $1, $3}' >> "$ROUNDS_OUT"
      done
    done
    # medians over the rounds; ratio = railnet's median / iperf3's median
    awk -v path="$path" -v cfg="$cfg" -v streams="$streams" -v out="$RESULTS" '
      function median(list,   a, n, i, j, t) {
        n = split(list, a, " ")
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      { key = $1 SUBSEP $2; vals[key] = vals[key] " " $3; if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
      END {
        ref = median(vals["iperf3" SUBSEP 0])
        printf "-- %s: NCCL_SOCKET_NTHREADS=%s NCCL_NSOCKS_PERTHREAD=%s (%s stream(s)); iperf3 -P %s: %.1f MB/s (rounds:%s)\n", path, substr(cfg, 1, index(cfg, "x") - 1), substr(cfg, index(cfg, "x") + 1), streams, streams, ref, vals["iperf3" SUBSEP 0]
        printf "%-8s %-10s %10s %10s %8s   %s\n", "variant", "#bytes", "BW MB/s", "x iperf3", "x tcp", "rounds (MB/s)"
        for (i = 1; i <= n; i++) {
          split(order[i], p, SUBSEP)
          if (p[1] == "iperf3") continue
          m = median(vals[order[i]])
          t = ("tcp" SUBSEP p[2]) in vals ? median(vals["tcp" SUBSEP p[2]]) : 0
          xt = (p[1] != "tcp" && t > 0) ? sprintf("%.2f", m / t) : "-"
          if (ref <= 0) { printf "%-8s %-10s %10.1f %10s %8s  %s\n", p[1], p[2], m, "n/a", xt, vals[order[i]]; continue }
          printf "%-8s %-10s %10.1f %10.2f %8s  %s\n", p[1], p[2], m, m / ref, xt, vals[order[i]]
          if (p[1] != "tcp") print path, cfg, p[1], p[2], m, m / ref, (t > 0 ? m / t : -1) >> out
        }
      }' "$ROUNDS_OUT"
  done
done

echo
echo "== 2. goals (from the table above)"
awk '
  { key = $1 " " $2 " " $3; mbps[key, $4] = $5; ratio[key, $4] = $6; rtcp[key, $4] = $7; keys[key] = 1; split($2, t, "x"); helpers[key] = t[1] > 0 }
  END {
    for (k in keys) {
      if (helpers[k]) {
        worst = ""; for (kk in ratio) { split(kk, p, SUBSEP); if (p[1] == k && p[2] >= 65536 && (worst == "" || ratio[kk] < worst)) worst = ratio[kk] }
        if (worst != "") printf "%-18s helpers >= 1.0 x iperf3 from 64 KiB: %s (lowest %.2f)\n", k, (worst >= 1.0 ? "met" : "NOT met"), worst
        worst = ""; for (kk in rtcp) { split(kk, p, SUBSEP); if (p[1] == k && p[2] >= 65536 && rtcp[kk] >= 0 && (worst == "" || rtcp[kk] < worst)) worst = rtcp[kk] }
        if (worst != "") printf "%-18s helpers >= 1.0 x tcp (same buffers) from 64 KiB: %s (lowest %.2f)\n", k, (worst >= 1.0 ? "met" : "NOT met"), worst
      }
      if (((k SUBSEP 4096) in mbps) && ((k SUBSEP 65536) in mbps) && mbps[k, 65536] > 0) {
        r = mbps[k, 4096] / mbps[k, 65536]
        printf "%-18s 4 KiB >= 0.5 x the 64 KiB rate: %s (%.2f)\n", k, (r >= 0.5 ? "met" : "NOT met"), r
      }
    }
  }' "$RESULTS" | sort

echo
echo "== 3. 8-byte ping-pong latency (target <= 1.25 x raw TCP)"
NCCL_SOCKET_IFNAME=lo "$B" lat --iters 20000

echo
echo "== 4. instructions per 8-byte round trip (callgrind, one process, lock-step)"
if command -v valgrind >/dev/null; then
  for n in 1000 2000; do
    NCCL_SOCKET_IFNAME=lo valgrind --tool=callgrind --toggle-collect=benchRoundTrips \
      --callgrind-out-file=/tmp/rn-cg.$$.$n "$B" rtt1 --iters $n >/dev/null 2>&1
  done
  i1=$(callgrind_annotate /tmp/rn-cg.$$.1000 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
  i2=$(callgrind_annotate /tmp/rn-cg.$$.2000 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
  rm -f /tmp/rn-cg.$$.*
  if [ -n "$i1" ] && [ -n "$i2" ]; then
    echo "user-space instructions per round trip (2 messages): $(( (i2 - i1) / 1000 ))"
  else
    echo "callgrind gave no totals"
  fi
else
  echo "SKIP: valgrind not installed"
fi
