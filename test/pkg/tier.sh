#!/bin/bash
# The packaging tier: the man pages, the GPU script's no-GPU path, and the Debian package.
#   test/pkg/tier.sh                  every check; one PASS/FAIL/SKIP line each
#   test/pkg/tier.sh --counts-file F  (test/run-tests.sh) also writes "passed failed skipped"
#   test/pkg/tier.sh --count          the number of checks
# Checks:
#   man:  make man; each page renders with groff -ww -z -man with no warning, and mandoc
#         -T lint -W warning finds none; railnet(7) lists every variable that
#         railnet-diag --params --json declares
#   links: test/pkg/check-links.sh: every relative link of README.md, docs/ and the man
#         pages leads to a file of the tree (and its #anchor to a heading)
#   gpu:  shellcheck of the scripts; test/gpu/run-nccl.sh ends at once with
#         "SKIP: no NVIDIA GPU" and exit 0 on a host without one; test/gpu/nccl_allreduce.c
#         compiles where nccl.h and the CUDA headers are
#   deb (root): make deb (lintian without errors); the docs are in it; dpkg -i; the plugin loads by its bare
#         name from the multiarch libdir as NCCL loads it (NCCL_NET_PLUGIN=railnet, the newest
#         ncclNetPlugin_vN, init and devices); /usr/bin/railnet-diag --json is
#         JSON; man -w finds the pages; pkg-config links a program against librailnet;
#         dpkg -P leaves none of the package's files
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
NCHECKS=22
out=
case "${1:-}" in
  --count) echo "$NCHECKS"; exit 0 ;;
  --counts-file) out=$2 ;;
esac
logs="$BUILD/test/logs/pkg"
work="$BUILD/test/pkg"
mkdir -p "$logs" "$work"
P=0 F=0 S=0
pass() { echo "PASS: $*"; P=$((P + 1)); }
fail() { echo "FAIL: $*"; F=$((F + 1)); }
skip() { echo "SKIP: $*"; S=$((S + 1)); }
indent() { sed 's/^/    /' | head -n "${1:-15}"; }
done_() {
  [ -n "$out" ] && echo "$P $F $S" >"$out"
  echo "pkg tier: $P passed, $F failed, $S skipped"
  [ "$F" -eq 0 ]
  exit $?
}
echo "== tier pkg: man pages, test/gpu/run-nccl.sh without a GPU, the Debian package"

# ---- man pages (4 x groff, 4 x mandoc, 1 coverage)
pages="railnet.7 railnet-diag.1 railnet-perf.1 railnet-demo.1"
if ! make --no-print-directory -s BUILD="$BUILD" man >"$logs/man.log" 2>&1; then
  fail "make man (see $logs/man.log)"
  indent <"$logs/man.log"
  echo "SKIP: the man page checks: make man failed (8 checks)"
  S=$((S + 8))
else
  for p in $pages; do
    if msg=$(groff -ww -z -man "$BUILD/man/$p" 2>&1) && [ -z "$msg" ]; then
      pass "groff -ww -z -man $p: no warning"
    else
      fail "groff -ww -z -man $p:"
      echo "$msg" | indent
    fi
  done
  for p in $pages; do
    if ! command -v mandoc >/dev/null; then
      skip "mandoc -T lint $p: no mandoc (apt-get install mandoc)"
    elif msg=$(mandoc -T lint -W warning "$BUILD/man/$p" 2>&1); then
      pass "mandoc -T lint -W warning $p: nothing"
    else
      fail "mandoc -T lint -W warning $p:"
      echo "$msg" | indent
    fi
  done
  names=$(env -u NCCL_DEBUG -u NCCL_DEBUG_FILE "$BUILD/bin/railnet-diag" --params --json |
          grep -o '"name":"[A-Z0-9_]*"' | sed 's/"name":"\(.*\)"/\1/')
  n=0 missing=
  for v in $names; do
    n=$((n + 1))
    grep -qx ".B $v" "$BUILD/man/railnet.7" || missing="$missing $v"
  done
  if [ "$n" -gt 0 ] && [ -z "$missing" ]; then
    pass "railnet(7) lists all $n variables of railnet-diag --params"
  else
    fail "railnet(7) lacks variables that railnet-diag --params declares:${missing:- (none declared?)}"
  fi
fi

# ---- the documentation's links (1)
if msg=$(test/pkg/check-links.sh 2>&1); then
  pass "links: $(echo "$msg" | tail -n 1)"
else
  fail "links: dead relative links in README.md, docs/ or the man pages:"
  echo "$msg" | indent 30
fi

# ---- the GPU script (shellcheck, no-GPU run, the program compiles)
scripts=(test/gpu/run-nccl.sh test/pkg/tier.sh test/pkg/check-links.sh scripts/make-deb.sh scripts/version.sh
         bench/results.sh)
if ! command -v shellcheck >/dev/null; then
  skip "shellcheck: not installed (apt-get install shellcheck)"
elif msg=$(shellcheck "${scripts[@]}" 2>&1); then
  pass "shellcheck ${scripts[*]}"
else
  fail "shellcheck:"
  echo "$msg" | indent 30
fi
if { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; } ||
   compgen -G '/proc/driver/nvidia/gpus/*' >/dev/null; then
  skip "run-nccl.sh without a GPU: this host has one (run test/gpu/run-nccl.sh itself)"
else
  t0=$(date +%s%N)
  msg=$(env -u GPU_TEST_ASSUME_GPU timeout 20 test/gpu/run-nccl.sh 2>&1)
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$rc" -eq 0 ] && [ "$msg" = "SKIP: no NVIDIA GPU" ] && [ "$ms" -lt 3000 ]; then
    pass "test/gpu/run-nccl.sh without a GPU: 'SKIP: no NVIDIA GPU', exit 0, in $ms ms"
  else
    fail "test/gpu/run-nccl.sh without a GPU: exit $rc in $ms ms, printed:"
    echo "$msg" | indent
  fi
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
inc=
for d in "${NCCL_HOME:+$NCCL_HOME/include}" "$cuda/include" /usr/include; do
  [ -n "$d" ] && [ -f "$d/nccl.h" ] && { inc=$d; break; }
done
if [ -z "$inc" ] || [ ! -f "$cuda/include/cuda_runtime.h" ]; then
  skip "test/gpu/nccl_allreduce.c compiles: no nccl.h or CUDA headers here"
elif msg=$(cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsyntax-only -I"$inc" -I"$cuda/include" \
           test/gpu/nccl_allreduce.c 2>&1); then
  pass "test/gpu/nccl_allreduce.c compiles against $inc/nccl.h"
else
  fail "test/gpu/nccl_allreduce.c does not compile:"
  echo "$msg" | indent
fi

# ---- the Debian package (root): 9 checks; when one cannot go on, the rest are skipped
deb_checks=9
deb_first=$((P + F + S))
skip_deb() {
  local n=$((deb_checks - (P + F + S - deb_first)))
  echo "SKIP: deb: $1 ($n checks)"
  S=$((S + n))
  done_
}
[ "$(id -u)" -eq 0 ] || skip_deb "needs root (dpkg -i)"
for t in dpkg-buildpackage dh lintian dpkg man pkg-config; do
  command -v "$t" >/dev/null || skip_deb "no $t (scripts/deps.sh deb installs it)"
done
if dpkg-query -W -f='${db:Status-Status}' railnet 2>/dev/null | grep -q installed; then
  skip_deb "a railnet package is installed on this host already: not replacing it (dpkg -P railnet)"
fi
# shellcheck disable=SC2317 # (called by the trap)
purge() { dpkg -P railnet >>"$logs/dpkg.log" 2>&1; }
trap purge EXIT
if scripts/make-deb.sh "$BUILD/deb" >"$logs/make-deb.log" 2>&1; then
  deb=$(tail -n 1 "$logs/make-deb.log")
  pass "make deb: $(basename "$deb"), $(grep '^lintian:' "$logs/make-deb.log")"
  grep -E '^[EWI]: ' "$logs/make-deb.log" | indent 20
else
  fail "make deb (see $logs/make-deb.log):"
  tail -n 15 "$logs/make-deb.log" | indent
  skip_deb "make deb failed"
fi
# the docs: README.md and docs/ (debian/railnet.docs), the change log, the license
docs=$(dpkg-deb -c "$deb" | awk '{print $NF}' | grep '^\./usr/share/doc/railnet/' | sed 's|^\./usr/share/doc/railnet/||')
missing=
for f in README.md.gz docs/troubleshooting.md.gz docs/architecture.md.gz changelog.gz copyright; do
  echo "$docs" | grep -qxF "$f" || missing="$missing $f"
done
if [ -z "$missing" ]; then
  pass "the package ships the docs: $(echo "$docs" | grep -c '^docs/.*\.md\.gz$') pages of docs/, README.md, changelog, copyright"
else
  fail "the package lacks in /usr/share/doc/railnet:$missing (debian/railnet.docs)"
fi
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=$("$BUILD/bin/railnet-diag" --params --json | grep -o '"version":"[^"]*"' | head -n 1 | cut -d'"' -f4)
if [ "${version%-*}" = "$upstream" ]; then
  pass "debian/changelog's version $version is railnet's $upstream"
else
  fail "debian/changelog's version $version is not railnet's $upstream: add a changelog entry (dch -v $upstream-1)"
fi
if dpkg -i "$deb" >"$logs/dpkg.log" 2>&1; then
  pass "dpkg -i $(basename "$deb")"
else
  fail "dpkg -i (see $logs/dpkg.log)"
  indent <"$logs/dpkg.log"
  skip_deb "dpkg -i failed"
fi
dpkg -L railnet >"$work/files" 2>>"$logs/dpkg.log"
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
# the installed files only: no LD_LIBRARY_PATH into the build tree, the tools from /usr/bin
inst() { env -u LD_LIBRARY_PATH -u RAILNET_BUILD PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
# NCCL's loader: NCCL_NET_PLUGIN=railnet -> dlopen("libnccl-net-railnet.so"), the newest
# ncclNetPlugin_vN first, then init / devices / getProperties (the program is built with the
# tools' loader beside it, on the ABI headers only: nothing of the build tree's libraries)
if cc -I ext-net/include -I tools/common -o "$work/dlopen_plugin" test/pkg/dlopen_plugin.c tools/common/plugin_load.c \
     -ldl >"$logs/cc.log" 2>&1 &&
   msg=$(inst env NCCL_NET_PLUGIN=railnet "$work/dlopen_plugin" 2>&1) &&
   got=$(echo "$msg" | sed -n 's/^loaded \(.*\): ncclNetPlugin_v12 Rail[A-Za-z]*: init ok, [0-9]* device.*/\1/p') &&
   # the same file (with /lib a link to /usr/lib, the loader may name it /lib/...)
   [ -n "$got" ] && [ "$(readlink -f "$got")" = "$(readlink -f "/usr/lib/$multiarch/libnccl-net-railnet.so")" ] &&
   grep -qx "/usr/lib/$multiarch/libnccl-net-railnet.so" "$work/files"; then
  pass "NCCL_NET_PLUGIN=railnet: dlopen(\"libnccl-net-railnet.so\"), newest ABI first, init: $msg"
else
  fail "the installed plugin does not load as NCCL loads it (NCCL_NET_PLUGIN=railnet) from /usr/lib/$multiarch:"
  { cat "$logs/cc.log"; echo "$msg"; } | indent
fi
rc=0
inst railnet-diag --json >"$work/diag.json" 2>"$work/diag.err" || rc=$?
if [ "$(inst sh -c 'command -v railnet-diag')" = /usr/bin/railnet-diag ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]; } &&
   /usr/bin/python3 -m json.tool "$work/diag.json" >/dev/null 2>"$work/json.err"; then
  pass "/usr/bin/railnet-diag --json: a JSON object (exit $rc: $([ "$rc" -eq 0 ] && echo 'no problem' || echo 'a problem on this host'))"
else
  fail "/usr/bin/railnet-diag --json: exit $rc, or not JSON:"
  cat "$work/diag.err" "$work/json.err" | indent
fi
excluded=$(grep -hs '^path-exclude.*/usr/share/man' /etc/dpkg/dpkg.cfg.d/* || true)
found=
for p in railnet railnet-diag railnet-perf railnet-demo; do
  f=$(inst man -w "$p" 2>/dev/null) && found="$found $f"
done
if [ "$(echo "$found" | wc -w)" -eq 4 ] && echo "$found" | grep -q "/usr/share/man/man7/railnet.7"; then
  pass "man -w finds the installed pages:$found"
elif [ -n "$excluded" ]; then
  skip "man -w: dpkg on this host drops man pages ($excluded)"
else
  fail "man -w railnet / railnet-diag / railnet-perf / railnet-demo found only:${found:- nothing}"
fi
cat >"$work/use_lib.c" <<'C'
#include <stdio.h>
#include <railnet.h>
int main(void) {
  const ncclNet_t* net = railnetGetNet("socket");
  printf("%s %s\n", railnetVersion(), net ? net->name : "(none)");
  return net == NULL;
}
C
read -r -a flagv <<<"$(inst pkg-config --cflags --libs railnet 2>"$logs/pc.log")"
flags="${flagv[*]}"
if [ -n "$flags" ] && inst cc -o "$work/use_lib" "$work/use_lib.c" "${flagv[@]}" >>"$logs/pc.log" 2>&1 &&
   msg=$(inst "$work/use_lib" 2>&1); then
  pass "pkg-config --cflags --libs railnet ($flags): a program built on librailnet runs: $msg"
else
  fail "building on the installed librailnet with pkg-config failed:"
  indent <"$logs/pc.log"
fi
trap - EXIT
if ! dpkg -P railnet >>"$logs/dpkg.log" 2>&1; then
  fail "dpkg -P railnet (see $logs/dpkg.log)"
else
  left=
  while IFS= read -r f; do
    # directories the package shared with others (/usr, /usr/bin, ...) stay
    [ -e "$f" ] && [ ! -d "$f" ] && left="$left $f"
    [ -d "$f" ] && case "$f" in */railnet|*/railnet_net) left="$left $f" ;; esac
  done <"$work/files"
  if [ -z "$left" ] && [ -s "$work/files" ]; then
    pass "dpkg -P railnet: none of its $(wc -l <"$work/files") paths is left"
  else
    fail "dpkg -P railnet left:$left"
  fi
fi
done_
