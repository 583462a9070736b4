#!/bin/bash
# bench/socket.sh: the Socket transport against references measured in the same run.
#   1. loopback: unidirectional bandwidth through the plugin API (build/bench/socket_bench)
#      vs iperf3 with the same number of TCP streams, 4 KiB .. 64 MiB messages;
#   2. over a veth pair between two network namespaces (root): railnet-perf vs iperf3;
#   3. 8-byte ping-pong through isend/irecv/test vs a raw TCP ping-pong between the same
#      two processes;
#   4. instructions per 8-byte round trip (valgrind --tool=callgrind), repeatable.
# Only ratios mean something on a shared machine. Run: make bench
set -u
BUILD=${BUILD:-build}
export LD_LIBRARY_PATH="$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
SIZES=${SIZES:-"4096 65536 1048576 4194304 16777216 67108864"}
SECONDS_PER=${SECONDS_PER:-1}
B="$BUILD/bench/socket_bench"
PORT=$((5200 + $$ % 500))

iperf_mbps() { # HOSTADDR STREAMS [netns-client] -> MB/s (10^6 bytes) of a 2 s run
  local host=$1 streams=$2 ns=${3:-}
  local run=""
  [ -n "$ns" ] && run="ip netns exec $ns"
  $run iperf3 -c "$host" -p "$PORT" -P "$streams" -t 2 -f m 2>/dev/null |
    awk '/receiver/ && ($1 == "[SUM]" || NF > 0) {v=$(NF-2); u=$(NF-1)} END {if (u ~ /Gbits/) v*=1000; printf "%.1f\n", v/8}'
}

echo "== 1. loopback bandwidth: railnet Socket (plugin API) vs iperf3, same stream count"
for cfg in "0 0 1" "2 2 4"; do
  set -- $cfg
  nt=$1 ns=$2 streams=$3
  iperf3 -s -p "$PORT" -D -1 >/dev/null 2>&1; sleep 0.3
  ref=$(iperf_mbps 127.0.0.1 "$streams")
  echo "-- NCCL_SOCKET_NTHREADS=$nt NCCL_NSOCKS_PERTHREAD=$ns ($streams TCP stream(s)); iperf3 -P $streams: $ref MB/s"
  NCCL_SOCKET_IFNAME=lo NCCL_SOCKET_NTHREADS=$nt NCCL_NSOCKS_PERTHREAD=$ns \
    "$B" bw --seconds "$SECONDS_PER" --sizes "$SIZES" |
    awk -v ref="$ref" 'NR==1 {printf "%s %10s\n", $0, "x iperf3"; next} {printf "%s %10.2f\n", $0, $3/ref}'
done

echo
echo "== 2. over veth between two network namespaces: railnet-perf vs iperf3"
if [ "$(id -u)" -ne 0 ] || ! ip netns add rnb-a-$$ 2>/dev/null; then
  echo "SKIP: needs root and network namespaces"
else
  ip netns add rnb-b-$$
  trap 'ip netns del rnb-a-$$ 2>/dev/null; ip netns del rnb-b-$$ 2>/dev/null' EXIT
  ip link add rnbva type veth peer name rnbvb
  ip link set rnbva netns rnb-a-$$; ip link set rnbvb netns rnb-b-$$
  ip -n rnb-a-$$ addr add 198.18.20.1/24 dev rnbva; ip -n rnb-b-$$ addr add 198.18.20.2/24 dev rnbvb
  ip -n rnb-a-$$ link set rnbva up; ip -n rnb-b-$$ link set rnbvb up
  ip -n rnb-a-$$ link set lo up; ip -n rnb-b-$$ link set lo up
  sleep 1
  for cfg in "0 0 1" "2 2 4"; do
    set -- $cfg
    nt=$1 ns=$2 streams=$3
    ip netns exec rnb-a-$$ iperf3 -s -p "$PORT" -D -1 >/dev/null 2>&1; sleep 0.3
    ref=$(iperf_mbps 198.18.20.1 "$streams" rnb-b-$$)
    echo "-- threads $nt x sockets $ns ($streams stream(s)); iperf3 -P $streams: $ref MB/s"
    export NCCL_SOCKET_IFNAME=rnbv NCCL_SOCKET_NTHREADS=$nt NCCL_NSOCKS_PERTHREAD=$ns
    ip netns exec rnb-a-$$ "$BUILD/bin/railnet-perf" --server --port $((PORT + 1)) --timeout 60 >/dev/null 2>&1 &
    sleep 0.5
    ip netns exec rnb-b-$$ "$BUILD/bin/railnet-perf" --client 198.18.20.1 --port $((PORT + 1)) --bw -a \
      --min-size 4096 --max-size 67108864 -n 64 --csv 2>/dev/null |
      awk -F, -v ref="$ref" '$1 == "bw" && ($2 == 4096 || $2 == 65536 || $2 == 1048576 || $2 == 4194304 || $2 == 16777216 || $2 == 67108864) {
        mbps = $5 * 1.048576; printf "%-10s %10.1f MB/s %8.2f x iperf3\n", $2, mbps, mbps / ref }'
    wait
    unset NCCL_SOCKET_IFNAME NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD
  done
fi

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
