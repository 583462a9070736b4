#!/bin/sh
# Makes sure the Debian 12 packages railnet needs are installed.
#   scripts/deps.sh build   what `make` needs
#   scripts/deps.sh test    what `make test` needs (all tiers, incl. the soft-RoCE VM)
#   scripts/deps.sh deb     what `make deb` needs (dpkg-buildpackage, debhelper, lintian)
# As root it installs what is missing; otherwise it prints the one apt-get line and fails.
set -eu
BUILD_PKGS="gcc g++ make libibverbs-dev libgtest-dev pkg-config"
DEB_PKGS="$BUILD_PKGS dpkg-dev debhelper lintian"
TEST_PKGS="$BUILD_PKGS iproute2 nftables iperf3 procps clang libclang-rt-14-dev valgrind openmpi-bin"
# the packaging tier (test/pkg/): man pages, the .deb, the GPU script's shell
TEST_PKGS="$TEST_PKGS $DEB_PKGS groff-base mandoc man-db shellcheck python3"
# The soft-RoCE tier (test/softroce/) adds its packages here.
SOFTROCE_PKGS="qemu-system-x86 busybox-static rdma-core ibverbs-providers ibverbs-utils perftest cpio kmod xz-utils"

case "${1:-build}" in
  build) want="$BUILD_PKGS" ;;
  test) want="$TEST_PKGS"; [ "${SOFTROCE:-1}" = 0 ] || want="$want $SOFTROCE_PKGS" ;;
  deb) want="$DEB_PKGS" ;;
  *) echo "usage: $0 build|test|deb" >&2; exit 2 ;;
esac

missing=""
for p in $want; do
  st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$st" = installed ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "railnet needs these Debian packages:$missing" >&2
  echo "run: sudo apt-get update && sudo apt-get install -y$missing" >&2
  exit 1
fi
echo "railnet: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
