#!/bin/bash
# Builds railnet's Debian binary package with dpkg-buildpackage from debian/, in a copy of
# this tree, then runs lintian on it.
#   scripts/make-deb.sh OUTDIR     (make deb: OUTDIR is $(BUILD)/deb)
# dpkg-buildpackage writes its results next to the source tree it builds, so the source is
# copied to OUTDIR/railnet-VERSION first: the .deb, .buildinfo and .changes land in OUTDIR,
# never beside this checkout. Prints the path of the .deb as its last line.
# Exit status: 0 built and lintian found no error; 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${version%-*}
# the version is written once, in include/railnet.h; the changelog's newest entry must be it
want=$(scripts/version.sh)
if [ "$upstream" != "$want" ]; then
  echo "make deb: debian/changelog's newest entry is $version, but include/railnet.h says $want:" \
       "add a changelog entry (dch -v $want-1)" >&2
  exit 1
fi
src="$out/railnet-$upstream"
rm -rf "$src"
mkdir -p "$src"
# the files of the tree: git's list when this is a checkout (tracked and untracked, not
# ignored), else everything but build trees
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
    | tar --null -T - -cf - | tar -xf - -C "$src"
  # the pages' and the package's timestamps: the last commit's, as make man takes it
  SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || true)}
  [ -n "$SOURCE_DATE_EPOCH" ] && export SOURCE_DATE_EPOCH
else
  tar --exclude=./build --exclude='./build-*' --exclude=./.git -cf - . | tar -xf - -C "$src"
fi
rm -f "$out"/railnet_"$version"_*.deb "$out"/railnet-dbgsym_"$version"_*.deb \
      "$out"/railnet_"$version"_*.changes "$out"/railnet_"$version"_*.buildinfo
# the package is built as Debian builds it: not sanitized, in the copy's own build/, even
# when make test SANITIZE=... (test/pkg/tier.sh) runs this
unset SANITIZE BUILD
echo "== dpkg-buildpackage -b in $src (log: $out/build.log)"
if ! (cd "$src" && dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1; then
  tail -n 40 "$out/build.log"
  echo "make deb: dpkg-buildpackage failed; see $out/build.log" >&2
  exit 1
fi
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb="$out/railnet_${version}_${arch}.deb"
[ -f "$deb" ] || { echo "make deb: $deb was not made" >&2; exit 1; }
if command -v lintian >/dev/null; then
  echo "== lintian $(basename "$deb")"
  lrc=0
  lintian --fail-on error --display-info "$deb" >"$out/lintian.log" 2>&1 || lrc=$?
  # (lintian also says it should not run as root; its checks are the same)
  grep -v 'running with root privileges' "$out/lintian.log" || true
  if [ "$lrc" -ne 0 ]; then
    echo "make deb: lintian reports errors (exit $lrc)" >&2
    exit 1
  fi
  echo "lintian: no errors ($(grep -c '^W: ' "$out/lintian.log" || true) warnings, $(grep -c '^I: ' "$out/lintian.log" || true) info)"
else
  echo "make deb: no lintian (apt-get install lintian): the package was not checked" >&2
fi
echo "$deb"
