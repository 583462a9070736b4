#!/bin/bash
# bench/scale.sh [--comms "N ..."] [--peer-plugin PATH] [--repeat K] [--socket | --ib] [-o DIR]
#
# What a connection costs, at 1 .. 1024 comm pairs opened the way NCCL opens them (one listen
# comm per receive comm, connects and accepts progressed together, one 64 KiB buffer
# registered per comm): build/bench/scale_bench, a sender and a receiver process, once per N.
# Per side and N: setup time per comm, RSS, file descriptors and threads per comm with all N
# open, the time of the first 8-byte message on all comms, and what is left after closing
# everything (fds, threads, RSS growth over the figures taken right after init).
#   Socket: railnet's Socket transport on loopback in a network namespace of its own (root),
#           ulimit -n raised for the run (docs/socket-transport.md: a job of N comms needs ~2N+ fds);
#   IB:     railnet's IB transport between rxe0 (sender) and rxe1 (receiver) in the soft-RoCE
#           VM (one boot, test/softroce/run-vm.sh), and beside it the same figures for
#           --peer-plugin PATH (e.g. libnccl-net-ibext.so, NVIDIA's IBext plugin from nccl-rdma-sharp-plugins, built outside this tree),
#           with the ratio railnet / peer per column.
# Only ratios between columns of one run mean much (TCG, a shared host); even those swing with
# the host's load (setup time by 2x between runs minutes apart), and the first run after the
# boot is the slowest (cold caches); --repeat K measures each plugin K times, railnet and the
# peer in turn (which of them goes first alternates), and the table gives medians and the
# setup ratio of each railnet/peer pair.
# Options:
#   --comms "N ..."      comm pair counts (default: 1 16 128 512 1024)
#   --peer-plugin PATH   another plugin (ncclNetPlugin_v11) measured in the same VM boot
#   --repeat K           K runs of each plugin per N, in turn (IB; default 1)
#   --socket | --ib      only that transport (default: both)
#   -o DIR               result directory (default: $RAILNET_BUILD/scale); scale.tsv there:
#                        TRANSPORT PLUGIN ROLE N SETUP_MS RSS_KiB FDS THREADS FIRST_MS
#                        CLOSED_RSS_KiB CLOSED_FDS CLOSED_THREADS (growth over the baseline)
# Called back as: scale.sh --in-vm COMMS REPEAT [PEER] (inside the VM, results in $SOFTROCE_OUT) and
# scale.sh --scale-one TRANSPORT LABEL PLUGIN N (one run, inside the namespace).
set -u
# every run's output also goes to bench/results/<date>-scale.txt (bench/results.sh)
. "$(dirname "$0")/results.sh"
case "${1:-}" in --in-vm|--scale-one) ;; *) railnetBenchResults scale "$0" "$@" ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
BUILD=${RAILNET_BUILD:-$REPO/build}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
SB=$BUILD/bench/scale_bench
PLUGIN=$BUILD/lib/libnccl-net-railnet.so

# one TRANSPORT LABEL PLUGIN N [scale_bench args]: appends the two sides' rows to $TSV
one() {
  local tr=$1 label=$2 plugin=$3 n=$4 out
  shift 4
  if ! out=$("$SB" --plugin "$plugin" --comms "$n" --timeout 900 "$@" 2>"$RES/err.$label.$n"); then
    echo "  $label $n comm pairs: FAILED ($(tail -1 "$RES/err.$label.$n"))" >&2
    printf '%s\t%s\tfailed\t%s\n' "$tr" "$label" "$n" >>"$TSV"
    return 1
  fi
  awk -v t="$tr" -v l="$label" '$1 == "scale" { $1 = ""; printf "%s\t%s%s\n", t, l, $0 }' OFS='\t' <<<"$out" >>"$TSV"
}

# table TRANSPORT: per role and N, the per-comm figures of each plugin (the median of its runs)
# and railnet / peer; with several runs, the setup ratio of each railnet/peer pair in turn
table() {
  awk -F'\t' -v tr="$1" '
    $1 != tr || $3 == "failed" { next }
    { k = $3 SUBSEP $4; seen[$4] = 1; pl[$2] = 1; c = ++runs[$2, k]
      setup[$2, k, c] = $5 / $4; rss[$2, k, c] = $6 / $4; first[$2, k, c] = $9
      fds[$2, k] = $7; thr[$2, k] = $8; crss[$2, k] = $10; cfds[$2, k] = $11; cthr[$2, k] = $12; have[$2, k] = 1 }
    function r(a, b) { return (b > 0) ? sprintf("%.2f", a / b) : "-" }
    function med(a, p, k, n,   i, j, t, v) {
      for (i = 1; i <= n; i++) v[i] = a[p, k, i]
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    END {
      peer = ""; for (p in pl) if (p != "railnet") peer = p
      printf "  %-5s %5s  %-8s %9s %10s %6s %5s %9s   %s\n", "side", "N", "plugin", "setup_ms", "RSS_KiB", "fds", "thr", "first_ms", "after close: RSS_KiB fds thr"
      printf "  %-5s %5s  %-8s %9s %10s %6s %5s %9s\n", "", "", "", "/comm", "/comm", "", "", "all"
      n = 0; for (x in seen) ns[++n] = x + 0
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (ns[j] < ns[i]) { t = ns[i]; ns[i] = ns[j]; ns[j] = t }
      split("send recv", roles, " ")
      for (ri = 1; ri <= 2; ri++) for (i = 1; i <= n; i++) {
        k = roles[ri] SUBSEP ns[i]
        for (p in pl) if (have[p, k]) {
          S[p] = med(setup, p, k, runs[p, k]); R[p] = med(rss, p, k, runs[p, k]); F[p] = med(first, p, k, runs[p, k])
          printf "  %-5s %5d  %-8s %9.2f %10.1f %6d %5d %9.1f   %8d %4d %3d\n", roles[ri], ns[i], p, S[p], R[p], fds[p, k], thr[p, k], F[p], crss[p, k], cfds[p, k], cthr[p, k]
        }
        if (peer != "" && have["railnet", k] && have[peer, k]) {
          printf "  %-5s %5d  %-8s %9s %10s %6s %5s %9s\n", "", ns[i], "ratio", r(S["railnet"], S[peer]), r(R["railnet"], R[peer]), r(fds["railnet", k], fds[peer, k]), "", r(F["railnet"], F[peer])
          m = runs["railnet", k] < runs[peer, k] ? runs["railnet", k] : runs[peer, k]
          if (m > 1) {
            line = ""; for (c = 1; c <= m; c++) line = line " " r(setup["railnet", k, c], setup[peer, k, c])
            printf "  %-5s %5d  setup ratio of each run, in turn:%s\n", "", ns[i], line
          }
        }
      }
    }' "$TSV"
}

# ------------------------------------------------------------------ inside the VM
if [ "${1:-}" = --scale-one ]; then
  one "$2" "$3" "$4" "$5"
  exit
fi
if [ "${1:-}" = --in-vm ]; then
  COMMS=$2 REPEAT=$3 RES=$SOFTROCE_OUT PEER=${4:-}
  TSV=$RES/scale.tsv
  read -r d0 d1 <<<"$SOFTROCE_DEVS"
  ulimit -n "$(ulimit -Hn)"
  st=0
  for n in $COMMS; do
    # in turn, the first run of the boot alternating (it is the slowest: cold caches)
    for ((k = 0; k < REPEAT; k++)); do
      if [ -n "$PEER" ] && [ $((k % 2)) = 1 ]; then one ib peer "$PEER" "$n" --send-hca "$d0" --recv-hca "$d1" || st=1; fi
      RAILNET_TRANSPORT=ib one ib railnet "$PLUGIN" "$n" --send-hca "$d0" --recv-hca "$d1" || st=1
      if [ -n "$PEER" ] && [ $((k % 2)) = 0 ]; then one ib peer "$PEER" "$n" --send-hca "$d0" --recv-hca "$d1" || st=1; fi
    done
  done
  exit $st
fi

# ------------------------------------------------------------------ on the host
COMMS="1 16 128 512 1024" PEER="" DO_SOCKET=1 DO_IB=1 RES=$BUILD/scale REPEAT=1
while [ $# -gt 0 ]; do
  case "$1" in
    --comms) COMMS=$2; shift 2 ;;
    --peer-plugin) PEER=$(readlink -f "$2"); shift 2
      [ -f "$PEER" ] || { echo "bench/scale.sh: --peer-plugin $2: no such file" >&2; exit 2; } ;;
    --repeat) REPEAT=$2; shift 2
      [[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "bench/scale.sh: --repeat $REPEAT: a count of 1 or more" >&2; exit 2; } ;;
    --socket) DO_IB=0; shift ;;
    --ib) DO_SOCKET=0; shift ;;
    -o) RES=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/scale.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for f in "$SB" "$PLUGIN"; do
  [ -e "$f" ] || { echo "bench/scale.sh: $f is missing; run make bench-build first" >&2; exit 2; }
done
mkdir -p "$RES"
RES=$(readlink -f "$RES")
TSV=$RES/scale.tsv
: >"$TSV"
echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%F %T') UTC"
st=0
if [ "$DO_SOCKET" = 1 ]; then
  echo "== Socket transport (loopback in a network namespace; NCCL_SOCKET_NTHREADS=0)"
  NS=rnscale-$$
  if [ "$(id -u)" -ne 0 ] || ! ip netns add "$NS" 2>/dev/null; then
    echo "SKIP: needs root and network namespaces"
  else
    trap 'ip netns del "$NS" 2>/dev/null' EXIT
    ip -n "$NS" link set lo up
    export RES TSV
    for n in $COMMS; do
      ip netns exec "$NS" bash -c "ulimit -n "$(ulimit -Hn)"; RAILNET_TRANSPORT=socket NCCL_SOCKET_IFNAME=lo NCCL_SOCKET_NTHREADS=0 \
        \"\$0\" --scale-one socket railnet \"$PLUGIN\" $n" "$HERE/scale.sh" || st=1
    done
    table socket
    # with helper threads (AWS ENA's automatic 2 x 8 costs 17 fds and 2 threads per comm): up to 128 pairs
    echo "== Socket transport with helper threads: NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2 (N <= 128)"
    for n in $COMMS; do
      [ "$n" -le 128 ] || continue
      ip netns exec "$NS" bash -c "ulimit -n "$(ulimit -Hn)"; RAILNET_TRANSPORT=socket NCCL_SOCKET_IFNAME=lo NCCL_SOCKET_NTHREADS=2 \
        NCCL_NSOCKS_PERTHREAD=2 \"\$0\" --scale-one socket-2x2 railnet \"$PLUGIN\" $n" "$HERE/scale.sh" || st=1
    done
    table socket-2x2
  fi
fi
if [ "$DO_IB" = 1 ]; then
  echo "== IB transport (soft-RoCE VM: rxe0 sender -> rxe1 receiver)${PEER:+; peer: $PEER}"
  # the whole run is one VM boot; 1024 comm pairs of two plugins under TCG take minutes
  SOFTROCE_VM_MEM=${SOFTROCE_VM_MEM:-4096} SOFTROCE_VM_TIMEOUT=${SOFTROCE_VM_TIMEOUT:-3000} SOFTROCE_CMD_TIMEOUT=${SOFTROCE_CMD_TIMEOUT:-2900} \
    "$REPO/test/softroce/run-vm.sh" -q -o "$RES/vm" "scale=$HERE/scale.sh --in-vm '$COMMS' $REPEAT $PEER" || st=1
  [ -s "$RES/vm/scale.tsv" ] && cat "$RES/vm/scale.tsv" >>"$TSV"
  grep -h 'FAILED\|WARN' "$RES/vm/scale.log" 2>/dev/null | head -20
  table ib
fi
echo "results: $TSV"
exit $st
