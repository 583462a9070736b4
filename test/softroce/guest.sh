#!/bin/bash
# guest.sh [--host] OUT: the soft-RoCE tier's work on the test machine.
# In the VM (run by /init inside a chroot of the host's root): creates the test network
# (veth0/veth1, 198.18.0.1/.2, routed over the veth), two rxe devices on it, prints their
# GID tables, then runs the jobs of OUT/jobs. With --host (the host has an active RDMA
# port): uses the host's active devices as they are and runs the same jobs.
#
# OUT (written by run-vm.sh): env (variables for the jobs), jobs ("NAME<TAB>COMMAND" lines).
# OUT (written here): setup.log, status ("net ok", "rxe ok", "done"), NAME.log, NAME.rc.
# Jobs see SOFTROCE_MODE (vm|host), SOFTROCE_DEVS, SOFTROCE_NETDEVS, SOFTROCE_ADDRS,
# SOFTROCE_GID_INDEXES (one word per device, in the same order), SOFTROCE_OUT.
set -u
MODE=vm
if [ "${1:-}" = --host ]; then MODE=host; shift; fi
OUT=$1
# shellcheck disable=SC1091
. "$OUT/env"
CT=${SOFTROCE_CMD_TIMEOUT:-180}

# Forks are slow under emulation: read files and the clock with builtins.
rd() { local v; read -r v <"$1" 2>/dev/null || return 1; printf '%s' "$v"; }
# get VAR FILE: VAR=first line of FILE, without a subshell; empty and status 1 if unreadable.
get() { read -r "$1" <"$2" 2>/dev/null || { printf -v "$1" ''; return 1; }; }
cs() { local u; read -r u _ </proc/uptime; u=${u/./}; echo $((10#$u)); }  # centiseconds
START=$(cs)
now() { local t=$(($(cs) - START)); printf '%d.%d' $((t / 100)) $((t % 100 / 10)); }
log() { echo "$*"; echo "$*" >>"$OUT/setup.log"; }
fatal() { log "FATAL: $*"; echo "fatal $*" >>"$OUT/status"; exit 1; }
sysw() { echo "$2" >"/proc/sys/$1" || fatal "cannot write $2 to /proc/sys/$1"; }

NET=(veth0 veth1)
ADDR=(198.18.0.1 198.18.0.2)
MAC=(02:00:c6:12:00:01 02:00:c6:12:00:02)
DEVS=(rxe0 rxe1)

# Two addresses of one host normally talk through lo. Force each one's traffic to the
# other out of its own veth end: per-address routes in table 100, consulted before the
# local table for locally generated packets (iif lo); the far end accepts a packet from
# a local source (accept_local) and does no reverse-path check. Neighbours are static.
setup_net() {
  local i j k cmds=""
  # rdma_rxe (6.1) sends the responses of an RDMA read without flow control: the 1024
  # packets of a 1 MiB read at MTU 1024, several at once, overflow the default backlog of
  # 1000, and its retry of a read whose responses were dropped can complete the read as a
  # success with none of the data written (found by the 4-rank RMA get test; docs/ib-rma.md)
  sysw net/core/netdev_max_backlog 20000
  for k in all default; do
    sysw "net/ipv4/conf/$k/rp_filter" 0
    sysw "net/ipv4/conf/$k/accept_local" 1
  done
  cmds+="link add ${NET[0]} address ${MAC[0]} type veth peer name ${NET[1]} address ${MAC[1]}"$'\n'
  cmds+="link set lo up"$'\n'
  for i in 0 1; do
    j=$((1 - i))
    cmds+="addr add ${ADDR[i]}/32 dev ${NET[i]}"$'\n'
    cmds+="link set ${NET[i]} up"$'\n'
    cmds+="neigh replace ${ADDR[j]} lladdr ${MAC[j]} dev ${NET[i]} nud permanent"$'\n'
    cmds+="route add ${ADDR[j]}/32 dev ${NET[i]} src ${ADDR[i]} table 100"$'\n'
  done
  cmds+="rule add pref 10 iif lo lookup 100"$'\n'
  cmds+="rule add pref 20 lookup local"$'\n'
  cmds+="rule del pref 0 lookup local"$'\n'
  ip -batch - <<<"$cmds" || fatal "ip -batch failed setting up the veth pair and its routes"
  for i in 0 1; do
    sysw "net/ipv4/conf/${NET[i]}/rp_filter" 0
    sysw "net/ipv4/conf/${NET[i]}/accept_local" 1
  done
}

counter() { local c; get c "/sys/class/net/$1/statistics/$2"; echo "$c"; }

check_net() {
  local before after
  before=$(counter "${NET[1]}" rx_packets)
  ping_cmd=(ping)
  command -v ping >/dev/null || ping_cmd=(busybox ping)
  "${ping_cmd[@]}" -c 1 -W 5 -I "${ADDR[0]}" "${ADDR[1]}" >/dev/null 2>&1 ||
    fatal "ping ${ADDR[0]} -> ${ADDR[1]} failed; routes: $(ip route show table 100 | tr '\n' ';')"
  after=$(counter "${NET[1]}" rx_packets)
  [ "$after" -gt "$before" ] || fatal "ping ${ADDR[0]} -> ${ADDR[1]} did not cross ${NET[0]} -> ${NET[1]}"
  log "net: ${NET[0]} ${ADDR[0]} <-> ${NET[1]} ${ADDR[1]} at +$(now)s, ping crosses the veth ($((after - before)) packets)"
}

port_active() { local st; get st "/sys/class/infiniband/$1/ports/$2/state"; [[ "$st" == *ACTIVE* ]]; }

# gid_index DEV [VAR]: the first RoCE v2 GID that maps an IPv4 address, or "" (IB: 0).
gid_index() {
  local _d=/sys/class/infiniband/$1/ports/1 _i _ll _g _t _r=""
  get _ll "$_d/link_layer"
  if [ "$_ll" = InfiniBand ]; then _r=0; else
    for _i in 0 1 2 3 4 5 6 7; do
      get _g "$_d/gids/$_i"
      case "$_g" in
        0000:0000:0000:0000:0000:ffff:*)
          get _t "$_d/gid_attrs/types/$_i"
          [ "$_t" = "RoCE v2" ] && { _r=$_i; break; } ;;
      esac
    done
  fi
  if [ -n "${2:-}" ]; then printf -v "$2" '%s' "$_r"; else echo "$_r"; fi
}

setup_rxe() {
  local i n
  for i in 0 1; do
    rdma link add "${DEVS[i]}" type rxe netdev "${NET[i]}" ||
      fatal "rdma link add ${DEVS[i]} type rxe netdev ${NET[i]} failed"
  done
  # The port turns active and the address GIDs appear shortly after (a kernel worker).
  local g0 g1
  for ((n = 0; n < 100; n++)); do
    if port_active "${DEVS[0]}" 1 && port_active "${DEVS[1]}" 1; then
      gid_index "${DEVS[0]}" g0
      gid_index "${DEVS[1]}" g1
      [ -n "$g0" ] && [ -n "$g1" ] && return 0
    fi
    sleep 0.1
  done
  fatal "rxe devices not ready after 10 s: $(cat /sys/class/infiniband/*/ports/1/state 2>/dev/null | tr '\n' ' ')"
}

ipv4_of_gid() {
  local g=${1//:/}
  printf '%d.%d.%d.%d' "0x${g:24:2}" "0x${g:26:2}" "0x${g:28:2}" "0x${g:30:2}"
}

# Prints a port's GID table from sysfs. Only populated slots have a type, and reading
# all 1024 types costs seconds under emulation, so the scan ends at 4 empty slots in a row.
print_gids() {
  local dev=$1 port=$2 d=/sys/class/infiniband/$1/ports/$2 i gid type ndev empty=0 len note st ll rate line
  len=$(compgen -G "$d/gids/*" | wc -l)
  get st "$d/state"; get ll "$d/link_layer"; get rate "$d/rate"
  log "  $dev port $port: $st, $ll, $rate, gid_tbl_len $len"
  log "    index  gid                                      type      ndev"
  for ((i = 0; i < len && empty < 4; i++)); do
    get gid "$d/gids/$i" || break
    if [ "$gid" = 0000:0000:0000:0000:0000:0000:0000:0000 ]; then empty=$((empty + 1)); continue; fi
    empty=0
    get type "$d/gid_attrs/types/$i" || type="?"
    get ndev "$d/gid_attrs/ndevs/$i" || ndev="-"
    note=""
    case "$gid" in 0000:0000:0000:0000:0000:ffff:*) note=" ($(ipv4_of_gid "$gid"))" ;; esac
    printf -v line '    %-5s  %-39s  %-8s  %s%s' "$i" "$gid" "$type" "$ndev" "$note"
    log "$line"
  done
}

host_devices() {
  local p dev
  DEVS=() NET=() ADDR=()
  for p in /sys/class/infiniband/*/ports/1; do
    dev=$(basename "$(dirname "$(dirname "$p")")")
    port_active "$dev" 1 && DEVS+=("$dev")
  done
  [ "${#DEVS[@]}" -gt 0 ] || fatal "no active RDMA port on this host"
  [ "${#DEVS[@]}" -gt 1 ] || DEVS+=("${DEVS[0]}")
  DEVS=("${DEVS[0]}" "${DEVS[1]}")
}

counters_line() {
  local n
  for n in "${NET[@]}"; do
    printf '%s tx %s pkts %s bytes, rx %s pkts %s bytes; ' "$n" \
      "$(counter "$n" tx_packets)" "$(counter "$n" tx_bytes)" \
      "$(counter "$n" rx_packets)" "$(counter "$n" rx_bytes)"
  done
}

if [ "$MODE" = vm ]; then
  get krel /proc/sys/kernel/osrelease
  read -r _ memkb _ </proc/meminfo
  log "guest: kernel $krel, $(grep -c ^processor /proc/cpuinfo) CPUs, $((memkb / 1024)) MiB"
  setup_net
  check_net
  echo "net ok" >>"$OUT/status"
  setup_rxe
else
  host_devices
  NET=()
fi
GIDX=()
for i in 0 1; do
  gid_index "${DEVS[i]}" g
  # On real RoCE without an IPv4 GID the tests pick their own; 0 is only a default.
  [ -n "$g" ] || [ "$MODE" = vm ] || g=0
  GIDX+=("$g")
done
log "rdma: ${DEVS[*]} ready at +$(now)s; GID tables (from sysfs):"
print_gids "${DEVS[0]}" 1
[ "${DEVS[1]}" = "${DEVS[0]}" ] || print_gids "${DEVS[1]}" 1
if [ "$MODE" = host ]; then
  for i in 0 1; do
    ADDR[i]=127.0.0.1
    g=$(rd "/sys/class/infiniband/${DEVS[i]}/ports/1/gids/${GIDX[i]:-0}")
    case "$g" in 0000:0000:0000:0000:0000:ffff:*) ADDR[i]=$(ipv4_of_gid "$g") ;; esac
  done
fi
for i in 0 1; do
  port_active "${DEVS[i]}" 1 || fatal "${DEVS[i]} port 1 is not active"
  [ -n "${GIDX[i]}" ] || fatal "${DEVS[i]} has no usable GID (RoCE v2 with an IPv4 address)"
done
echo "rxe ok ${DEVS[*]}" >>"$OUT/status"

export SOFTROCE_MODE=$MODE SOFTROCE_OUT=$OUT
export SOFTROCE_DEVS="${DEVS[*]}" SOFTROCE_NETDEVS="${NET[*]}" SOFTROCE_ADDRS="${ADDR[*]}"
export SOFTROCE_GID_INDEXES="${GIDX[*]}"
[ "${#NET[@]}" -eq 0 ] || log "counters before jobs: $(counters_line)"

while IFS=$'\t' read -r name cmd; do
  [ -n "$name" ] || continue
  t0=$(now)
  log "job $name: $cmd"
  (cd "${SOFTROCE_CWD:-/}" && exec timeout -k 5 "$CT" bash -c "$cmd") >"$OUT/$name.log" 2>&1 </dev/null
  rc=$?
  echo "$rc" >"$OUT/$name.rc"
  log "job $name: rc=$rc at +$(now)s (started at +${t0}s)"
done <"$OUT/jobs"

[ "${#NET[@]}" -eq 0 ] || log "counters after jobs: $(counters_line)"
log "guest done at +$(now)s"
echo "done $(now)" >>"$OUT/status"
