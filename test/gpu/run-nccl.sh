#!/bin/bash
# railnet inside real NCCL, on a machine with an NVIDIA GPU and a CUDA toolkit.
#   test/gpu/run-nccl.sh
# Builds railnet (make lib tools) and test/gpu/nccl_allreduce.c against the CUDA toolkit
# and the NCCL found on this machine (no network needed), then:
#   1. an all-reduce and a send/recv between 2 ranks (2 processes on one GPU) through
#      NCCL_NET_PLUGIN=railnet with RAILNET_TRANSPORT=socket: each rank gets its own
#      NCCL_HOSTID and P2P/SHM are off, so NCCL takes them for two hosts and moves the data
#      through the net plugin; NCCL's log must say "Using network RailSocket" and the
#      channels must run "via NET/RailSocket";
#   2. the same with RAILNET_TRANSPORT=ib ("Using network RailIB") when an RDMA port is
#      ACTIVE;
#   3. build/bin/railnet-perf --use-cuda: through GPU memory on RailIB when the device has
#      GPUDirect (NCCL_PTR_CUDA); on RailSocket it must refuse (exit 2) as documented.
# One line per step: PASS: / FAIL: / SKIP: <what>. Every step runs under `timeout`, and
# all of them within GPU_TEST_BUDGET seconds (default 600). Without a GPU it prints
# "SKIP: no NVIDIA GPU" at once and exits 0. Exit status: 0 no FAIL, 1 a FAIL.
# Where things are: CUDA_HOME (else /usr/local/cuda, else nvcc's), NCCL_HOME (else nccl.h
# beside CUDA's headers or in /usr/include, and libnccl.so.2 from ldconfig), GPU (default 0).
# Logs: $BUILD/test/gpu/ (BUILD default build). GPU_TEST_ASSUME_GPU=1 goes on past the GPU
# check, to try the script's other steps on a machine without one (the NCCL steps fail).
set -u
cd "$(dirname "$0")/../.." || exit 1
start=$(date +%s)
budget=${GPU_TEST_BUDGET:-600}
fails=0

pass() { echo "PASS: $*"; }
skip() { echo "SKIP: $*"; }
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
# show the end of a log under a FAIL line
tail_log() { [ -f "$1" ] && tail -n "${2:-15}" "$1" | sed 's/^/    /'; }
# seconds for the next step: at most $1, and what is left of the budget (at least 1:
# `timeout 0` would mean no limit at all)
limit() {
  local left=$((budget - ($(date +%s) - start) - 5))
  [ "$left" -lt 1 ] && left=1
  [ "$left" -lt "$1" ] && { echo "$left"; return; }
  echo "$1"
}
finish() {
  echo "$fails failed ($(( $(date +%s) - start )) s of a ${budget} s budget)"
  [ "$fails" -eq 0 ]
  exit $?
}

# ---- a GPU? (quick: nothing is built before this)
have_gpu() {
  if command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    return 0
  fi
  compgen -G '/proc/driver/nvidia/gpus/*' >/dev/null
}
if [ "${GPU_TEST_ASSUME_GPU:-0}" != 1 ] && ! have_gpu; then
  echo "SKIP: no NVIDIA GPU"
  exit 0
fi
gpu=${GPU:-0}
BUILD=${BUILD:-build}
logs="$BUILD/test/gpu"
mkdir -p "$logs"
echo "== railnet in NCCL on $(timeout 20 nvidia-smi -L 2>/dev/null | sed -n "$((gpu + 1))p" || echo "GPU $gpu")"

# ---- the CUDA toolkit and NCCL
cuda=
for d in "${CUDA_HOME:-}" /usr/local/cuda "$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x/x)")")"; do
  if [ -n "$d" ] && [ -f "$d/include/cuda_runtime.h" ]; then
    cuda=$d
    break
  fi
done
cudart=
for d in "$cuda/lib64" "$cuda/lib" "$cuda/targets/$(uname -m)-linux/lib"; do
  if [ -n "$cuda" ] && [ -e "$d/libcudart.so" ]; then
    cudart="$d/libcudart.so"
    break
  fi
done
if [ -z "$cuda" ] || [ -z "$cudart" ]; then
  fail "no CUDA toolkit (cuda_runtime.h and libcudart.so; set CUDA_HOME)"
  finish
fi
nccl_inc=
for d in "${NCCL_HOME:+$NCCL_HOME/include}" "$cuda/include" /usr/include /usr/local/include; do
  if [ -n "$d" ] && [ -f "$d/nccl.h" ]; then
    nccl_inc=$d
    break
  fi
done
nccl_lib=
if [ -n "${NCCL_HOME:-}" ]; then
  for f in "$NCCL_HOME/lib/libnccl.so.2" "$NCCL_HOME/lib64/libnccl.so.2"; do
    [ -e "$f" ] && { nccl_lib=$f; break; }
  done
fi
[ -n "$nccl_lib" ] || nccl_lib=$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" {print $NF; exit}')
if [ -z "$nccl_lib" ]; then
  for f in "$cuda/lib64/libnccl.so.2" "$cuda/lib/libnccl.so.2"; do
    [ -e "$f" ] && { nccl_lib=$f; break; }
  done
fi
if [ -z "$nccl_inc" ] || [ -z "$nccl_lib" ]; then
  fail "no NCCL (nccl.h: ${nccl_inc:-not found}; libnccl.so.2: ${nccl_lib:-not found}; set NCCL_HOME)"
  finish
fi
ver=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' "$nccl_inc/nccl.h")
major=${ver%%.*}
minor=${ver#*.}
minor=${minor%%.*}
if [ "${major:-0}" -lt 2 ] || { [ "${major:-0}" -eq 2 ] && [ "${minor:-0}" -lt 19 ]; }; then
  fail "NCCL $ver ($nccl_inc/nccl.h) is older than 2.19, the first with ncclNet v8"
  finish
fi
pass "found CUDA in $cuda, NCCL $ver ($nccl_lib)"

# ---- build railnet and the test program
if timeout "$(limit 300)" make -j"$(nproc)" --no-print-directory lib tools >"$logs/build.log" 2>&1; then
  pass "make lib tools"
else
  fail "make lib tools (see $logs/build.log)"
  tail_log "$logs/build.log"
  finish
fi
prog="$logs/nccl_allreduce"
if timeout "$(limit 120)" "${CC:-cc}" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I"$nccl_inc" -I"$cuda/include" \
     -o "$prog" test/gpu/nccl_allreduce.c "$nccl_lib" "$cudart" \
     -Wl,-rpath,"$(dirname "$nccl_lib")" -Wl,-rpath,"$(dirname "$cudart")" >"$logs/cc.log" 2>&1; then
  pass "built test/gpu/nccl_allreduce.c against NCCL $ver"
else
  fail "cannot build test/gpu/nccl_allreduce.c (see $logs/cc.log)"
  tail_log "$logs/cc.log"
  finish
fi
LD_LIBRARY_PATH="$PWD/$BUILD/lib:$(dirname "$nccl_lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

# ---- 2 ranks, 2 processes, one GPU, through the plugin
# nccl_pair TRANSPORT NET: runs both ranks; checks their results and NCCL's log
nccl_pair() {
  local transport=$1 net=$2 idf="$logs/id.$1" t rc0 rc1 p0
  rm -f "$idf" "$idf.tmp"
  t=$(limit 120)
  # loopback only: NCCL's bootstrap and railnet's sockets both follow NCCL_SOCKET_IFNAME
  local -a envs=(NCCL_NET_PLUGIN=railnet RAILNET_TRANSPORT="$transport" NCCL_DEBUG=INFO
                 "NCCL_DEBUG_SUBSYS=INIT,NET,ENV" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
                 NCCL_SOCKET_IFNAME=lo)
  env "${envs[@]}" NCCL_HOSTID="railnet-gpu-test-0" timeout "$t" "$prog" 0 "$idf" 1048576 "$gpu" \
    >"$logs/$transport.rank0.log" 2>&1 &
  p0=$!
  env "${envs[@]}" NCCL_HOSTID="railnet-gpu-test-1" timeout "$t" "$prog" 1 "$idf" 1048576 "$gpu" \
    >"$logs/$transport.rank1.log" 2>&1
  rc1=$?
  if [ "$rc1" -ne 0 ]; then
    # rank 0 may be waiting for a peer that is gone: give it 15 s to end, then end it
    for _ in $(seq 15); do kill -0 "$p0" 2>/dev/null || break; sleep 1; done
    kill "$p0" 2>/dev/null
  fi
  wait "$p0"
  rc0=$?
  rm -f "$idf" "$idf.tmp"
  local r0="$logs/$transport.rank0.log" r1="$logs/$transport.rank1.log"
  if grep -q 'allreduce ok' "$r0" && grep -q 'allreduce ok' "$r1"; then
    pass "all-reduce through $net: 2 ranks on GPU $gpu, 1 Mi floats summed right on both"
  else
    fail "all-reduce through $net (rank 0 exit $rc0, rank 1 exit $rc1; logs $r0, $r1)"
    grep -h -E 'WRONG|failed|WARN' "$r0" "$r1" | head -n 10 | sed 's/^/    /'
  fi
  if grep -q 'sendrecv ok' "$r0" && grep -q 'sendrecv ok' "$r1"; then
    pass "send/recv through $net: each rank got the other's 1 Mi floats"
  else
    fail "send/recv through $net (rank 0 exit $rc0, rank 1 exit $rc1)"
  fi
  if grep -q "Using network $net\$" "$r0" && grep -q "Using network $net\$" "$r1" &&
     grep -q "via NET/$net" "$r0"; then
    pass "NCCL's log: 'Using network $net', channels via NET/$net"
  else
    fail "NCCL's log does not say 'Using network $net' with channels via NET/$net; it says:"
    grep -h -E 'Using network|NET/Plugin|via NET|via P2P|via SHM' "$r0" "$r1" | sort -u | head -n 8 | sed 's/^/    /'
  fi
}

nccl_pair socket RailSocket
ib_active=
for s in /sys/class/infiniband/*/ports/*/state; do
  [ -r "$s" ] && grep -q ACTIVE "$s" && { ib_active=$s; break; }
done
if [ -n "$ib_active" ]; then
  nccl_pair ib RailIB
else
  skip "NCCL through RailIB: no ACTIVE RDMA port (/sys/class/infiniband/*/ports/*/state)"
fi

# ---- railnet-perf through GPU memory
perf="$BUILD/bin/railnet-perf"
out="$logs/perf-socket.log"
RAILNET_TRANSPORT=socket NCCL_SOCKET_IFNAME=lo timeout "$(limit 60)" \
  "$perf" --loopback --use-cuda="$gpu" -s 1M -n 100 --bw >"$out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q 'no NCCL_PTR_CUDA' "$out"; then
  pass "railnet-perf --use-cuda on RailSocket: GPU $gpu found, refused as documented (exit 2, no NCCL_PTR_CUDA)"
else
  fail "railnet-perf --use-cuda on RailSocket: exit $rc, want 2 with 'no NCCL_PTR_CUDA' (see $out)"
  tail_log "$out" 5
fi
if [ -n "$ib_active" ]; then
  out="$logs/perf-ib.json"
  RAILNET_TRANSPORT=ib timeout "$(limit 120)" \
    "$perf" --loopback --use-cuda="$gpu" -a --min-size 4K --max-size 4M -n 200 --bw --json >"$out" 2>"$logs/perf-ib.err"
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q '"memory":"cuda"' "$out" && ! grep -q '"recv_check":"[^o]' "$out"; then
    pass "railnet-perf --use-cuda through RailIB: 4 KiB..4 MiB from GPU $gpu memory, every size checked ok"
  elif [ "$rc" -eq 2 ] && grep -q 'no NCCL_PTR_CUDA' "$logs/perf-ib.err"; then
    skip "railnet-perf --use-cuda through RailIB: the RDMA device has no GPUDirect (nvidia-peermem or DMA-BUF)"
  else
    fail "railnet-perf --use-cuda through RailIB: exit $rc (see $out, $logs/perf-ib.err)"
    tail_log "$logs/perf-ib.err" 5
  fi
else
  skip "railnet-perf --use-cuda through RailIB: no ACTIVE RDMA port"
fi
finish
