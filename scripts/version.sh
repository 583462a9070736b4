#!/bin/sh
# Prints railnet's version, MAJOR.MINOR.PATCH, from the one place it is written:
# include/railnet.h (RAILNET_VERSION_MAJOR / _MINOR / _PATCH). The build (railnet.pc, the
# man pages through railnet-diag) and scripts/make-deb.sh take it from here.
set -eu
h="$(dirname "$0")/../include/railnet.h"
v=
for part in MAJOR MINOR PATCH; do
  n=$(sed -n "s/^#define RAILNET_VERSION_$part \([0-9][0-9]*\)\$/\1/p" "$h")
  [ -n "$n" ] || { echo "$0: no RAILNET_VERSION_$part in $h" >&2; exit 1; }
  v="$v${v:+.}$n"
done
echo "$v"
