#!/bin/bash
# run-vm.sh [-o OUTDIR] [-t SECONDS] [-q] NAME=COMMAND ...
#
# Runs shell COMMANDs against two soft-RoCE devices and brings their results back:
# boots Debian's kernel in qemu (TCG), loads rdma_rxe, creates rxe0/rxe1 on a veth pair
# (198.18.0.1/.2), prints their GID tables, runs each COMMAND (bash -c, from the current
# directory, with the host's root as /, read-only except OUTDIR, /tmp and /run) and
# powers off. If the host itself has an active RDMA port, the COMMANDs run on the host.
#
#   OUTDIR/NAME.log, OUTDIR/NAME.rc   each COMMAND's output and exit status
#   OUTDIR/setup.log                  network, devices, GID tables, per-job times
#   OUTDIR/console.log                the VM's serial console
# COMMANDs run one after the other (each may start background processes and wait), and
# see SOFTROCE_DEVS, SOFTROCE_ADDRS, SOFTROCE_GID_INDEXES, SOFTROCE_NETDEVS, SOFTROCE_OUT
# (see guest.sh) plus the caller's LD_LIBRARY_PATH, PATH, RAILNET_*, NCCL_*, GTEST_* and the
# sanitizers' ASAN_*, LSAN_*, UBSAN_* options.
#
# Exit status: 0 all commands exited 0; 1 some command failed; 2 the VM or the device
# setup failed (its console log is printed).
# Environment: SOFTROCE_RUN_ON=vm|host (default: host when ibv_devinfo shows PORT_ACTIVE),
# SOFTROCE_VM_TIMEOUT (hard limit for the whole VM, default 280 s),
# SOFTROCE_CMD_TIMEOUT (per command, default 180 s), SOFTROCE_VM_MEM (MiB, default 2048),
# RAILNET_BUILD (build directory).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD_DIR=${RAILNET_BUILD:-$REPO/build}
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR=$REPO/$BUILD_DIR ;; esac
SR=$BUILD_DIR/softroce
OUT=$SR/run
TIMEOUT=${SOFTROCE_VM_TIMEOUT:-280}
QUIET=0

usage() { sed -n '2,3p' "$0" | sed 's/^# //' >&2; exit 2; }
while getopts o:t:q opt; do
  case $opt in
    o) OUT=$OPTARG ;;
    t) TIMEOUT=$OPTARG ;;
    q) QUIET=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || usage
case "$OUT" in /*) ;; *) OUT=$PWD/$OUT ;; esac
for p in "$OUT" "$REPO" "$BUILD_DIR" "$PWD"; do
  case "$p" in *[[:space:]:]*) echo "run-vm.sh: paths passed to the VM must not contain spaces or ':': $p" >&2; exit 2 ;; esac
done

say() { [ "$QUIET" = 1 ] || echo "$*"; }
fail() { echo "softroce: $*"; exit 2; }

MODE=${SOFTROCE_RUN_ON:-}
if [ -z "$MODE" ]; then
  MODE=vm
  if command -v ibv_devinfo >/dev/null && ibv_devinfo 2>/dev/null | grep -q PORT_ACTIVE; then
    MODE=host
  fi
fi

# OUT is emptied first: refuse a directory that is not empty and not an earlier OUT.
if [ -d "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && [ ! -f "$OUT/jobs" ]; then
  fail "$OUT is not empty and not an earlier result directory: not deleting it"
fi
rm -rf "$OUT"
mkdir -p "$OUT" && : >"$OUT/jobs" || fail "cannot create $OUT"
{
  for v in PATH LD_LIBRARY_PATH $(compgen -e | grep -E '^(RAILNET|NCCL|GTEST|SOFTROCE|ASAN|LSAN|UBSAN)_'); do
    [ -n "${!v+set}" ] && declare -p "$v" | sed 's/^declare -[a-z]* /export /'
  done
  printf 'export SOFTROCE_CWD=%q\n' "$PWD"
} >"$OUT/env"
names=()
for job in "$@"; do
  name=${job%%=*} cmd=${job#*=}
  [[ "$job" == *=* && "$name" =~ ^[A-Za-z0-9_.-]+$ ]] || fail "bad job '$job' (want NAME=COMMAND)"
  [[ "$cmd" != *$'\n'* ]] || fail "job $name: COMMAND must be one line"
  printf '%s\t%s\n' "$name" "$cmd" >>"$OUT/jobs"
  names+=("$name")
done

t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

if [ "$MODE" = host ]; then
  say "softroce: the host has an active RDMA port: running on the host"
  bash "$HERE/guest.sh" --host "$OUT" >/dev/null 2>"$OUT/guest.err"
else
  command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86_64 not found (package qemu-system-x86)"
  make -C "$REPO" --no-print-directory -s BUILD="$BUILD_DIR" softroce-vm >"$OUT/prepare.log" 2>&1 || {
    cat "$OUT/prepare.log"; fail "preparing the VM (kernel, initramfs) failed"; }
  [ "$QUIET" = 1 ] || grep -v '^make' "$OUT/prepare.log"
  kver=$(cat "$SR/kernel/version")
  say "softroce: VM image ready in $(elapsed)s; booting Debian kernel $kver in qemu (TCG, 2 CPUs, limit ${TIMEOUT}s)"
  t0=$(date +%s.%N)
  timeout -k 5 "$TIMEOUT" qemu-system-x86_64 \
    -accel tcg -cpu max -smp 2 -m "${SOFTROCE_VM_MEM:-2048}" -nodefaults -no-reboot \
    -display none -monitor none -serial "file:$OUT/console.log" -nic none \
    -kernel "$SR/vmlinux" -initrd "$SR/initramfs.cpio" \
    -append "console=ttyS0 quiet panic=-1 rn_out=$OUT rn_repo=$REPO rn_keep=$REPO:$BUILD_DIR:$PWD" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$OUT,mount_tag=out,security_model=none" \
    </dev/null >"$OUT/qemu.log" 2>&1
  qrc=$?
  say "softroce: VM ran $(elapsed)s (qemu exit $qrc$([ $qrc = 124 ] && echo ", killed at the ${TIMEOUT}s limit"))"
fi

[ "$QUIET" = 1 ] || { [ -f "$OUT/setup.log" ] && cat "$OUT/setup.log"; }
if ! grep -q '^rxe ok' "$OUT/status" 2>/dev/null; then
  if [ "$MODE" = vm ]; then
    what="did not boot"
    [ -f "$OUT/boot" ] && what="booted but the network or rxe setup failed"
    echo "softroce: FAILURE: the VM $what. qemu output:"
    sed 's/^/  | /' "$OUT/qemu.log"
    echo "softroce: console log ($OUT/console.log):"
    tail -n 80 "$OUT/console.log" 2>/dev/null | sed 's/^/  | /'
  else
    echo "softroce: FAILURE: device setup on the host failed:"
    cat "$OUT/guest.err" "$OUT/setup.log" 2>/dev/null | sed 's/^/  | /'
  fi
  exit 2
fi
status=0
for name in "${names[@]}"; do
  if [ ! -f "$OUT/$name.rc" ]; then
    echo "softroce: job $name did not finish (VM limit ${TIMEOUT}s?)"
    status=1
  elif [ "$(cat "$OUT/$name.rc")" != 0 ]; then
    status=1
  fi
done
if ! grep -q '^done' "$OUT/status"; then
  echo "softroce: the VM stopped before finishing its jobs; console log tail:"
  tail -n 30 "$OUT/console.log" 2>/dev/null | sed 's/^/  | /'
  status=1
fi
exit $status
