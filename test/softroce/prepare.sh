#!/bin/bash
# Prepares the soft-RoCE VM's inputs under a cache directory (build/softroce).
# Called by softroce.mk; each step writes its output only when it succeeded.
#
#   prepare.sh kernel-id FILE   resolve the current plain amd64 kernel package from the
#                               linux-image-amd64 metapackage; rewrite FILE ("pkg version")
#                               only when it changed, so make rebuilds only then
#   prepare.sh kernel DIR       download that package (apt-get download, never installed),
#                               unpack it into DIR/kernel with dpkg-deb -x, run depmod
#   prepare.sh initramfs DIR    build DIR/initramfs.cpio: busybox, the modules, /init
#
# SOFTROCE_KERNEL_DEB=/path/linux-image-*.deb uses that package instead (offline machines).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
META=linux-image-amd64
# What the VM loads; modprobe --show-depends adds their dependencies in load order.
# crc32_generic: rdma_rxe asks the crypto API for "crc32" (no hard module dependency).
# sch_netem: delay and reordering on the veth pair (the fault matrix).
# nf_tables: nftables rules in the VM (railnet-diag --pair drops RoCE v2, UDP 4791).
MODULES="crc32_generic rdma_rxe veth virtio_pci 9pnet_virtio 9p sch_netem nf_tables"

die() { echo "softroce prepare: $*" >&2; exit 1; }

# Prints "package version" of the kernel the metapackage points at, or nothing.
# One apt-cache call where the metapackage pins the version (Debian's does): without a
# binary cache (Docker-style apt configs) each call costs a second or more.
resolve_kernel() {
  local dep pkg ver
  dep=$(apt-cache show --no-all-versions "$META" 2>/dev/null | sed -n 's/^Depends: //p' | head -1 |
        tr ',' '\n' | sed -n 's/^ *\(linux-image-[^ ]*\)\( (= \([^)]*\))\)\{0,1\}.*/\1 \3/p' | head -1)
  pkg=${dep% *} ver=${dep#* }
  [ -n "$pkg" ] || return 0
  if [ -z "$ver" ] || [ "$ver" = "$pkg" ]; then
    ver=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
  fi
  [ -n "$ver" ] && [ "$ver" != "(none)" ] && echo "$pkg $ver"
}

kernel_id() {
  local out=$1 new lists=/var/lib/apt/lists
  if [ -n "${SOFTROCE_KERNEL_DEB:-}" ]; then
    [ -f "$SOFTROCE_KERNEL_DEB" ] || die "SOFTROCE_KERNEL_DEB=$SOFTROCE_KERNEL_DEB: no such file"
    new="file:$(readlink -f "$SOFTROCE_KERNEL_DEB") $(stat -c %Y "$SOFTROCE_KERNEL_DEB")"
  else
    # The answer can only change when the package lists do.
    if [ -s "$out" ] && [ -f "$out.checked" ] &&
       ! grep -q '^file:' "$out" && compgen -G "$lists/*_Packages*" >/dev/null &&
       [ -z "$(find "$lists" -maxdepth 1 -newer "$out.checked" -print -quit)" ]; then
      return 0
    fi
    new=$(resolve_kernel)
    if [ -z "$new" ] && [ "$(id -u)" -eq 0 ]; then
      # A fresh machine may have no package lists yet.
      apt-get update -qq >/dev/null 2>&1 || true
      new=$(resolve_kernel)
    fi
    if [ -z "$new" ]; then
      if [ -s "$out" ]; then
        echo "softroce prepare: cannot resolve $META (no apt lists?); keeping $(cat "$out")" >&2
        return 0
      fi
      die "cannot resolve the kernel package from $META: run 'apt-get update' (as root)"
    fi
  fi
  mkdir -p "$(dirname "$out")"
  if [ ! -f "$out" ] || [ "$(cat "$out")" != "$new" ]; then
    echo "$new" >"$out"
    echo "softroce: kernel package $new"
  fi
  touch "$out.checked"
}

download() { (cd "$1" && apt-get download -q -o APT::Sandbox::User=root "$2" >/dev/null); }

unpack_kernel() {
  local dir=$1 id pkg ver deb tmp kver
  id=$(cat "$dir/kernel.id")
  if [ "${id#file:}" != "$id" ]; then
    deb=${id#file:}; deb=${deb% *}
  else
    pkg=${id% *}; ver=${id#* }
    mkdir -p "$dir/dl"
    deb=$(find "$dir/dl" -maxdepth 1 -name "${pkg}_*.deb" | head -1)
    if [ -z "$deb" ] || [ "$(dpkg-deb -f "$deb" Version)" != "$ver" ]; then
      rm -f "$dir/dl/"*.deb
      echo "softroce: apt-get download $pkg=$ver"
      if ! download "$dir/dl" "$pkg=$ver"; then
        # Stale package lists name a version the mirror no longer has: refresh, resolve again.
        [ "$(id -u)" -eq 0 ] || die "apt-get download $pkg=$ver failed (stale lists? run apt-get update as root)"
        echo "softroce: download failed; apt-get update and resolving $META again"
        apt-get update -qq >/dev/null 2>&1 || true
        kernel_id "$dir/kernel.id"
        id=$(cat "$dir/kernel.id"); pkg=${id% *}; ver=${id#* }
        download "$dir/dl" "$pkg=$ver" || die "apt-get download $pkg=$ver failed"
      fi
      deb=$(find "$dir/dl" -maxdepth 1 -name "${pkg}_*.deb" | head -1)
      [ -n "$deb" ] || die "apt-get download left no ${pkg}_*.deb in $dir/dl"
    fi
  fi
  tmp="$dir/kernel.tmp"
  rm -rf "$tmp"
  echo "softroce: unpacking $(basename "$deb")"
  dpkg-deb -x "$deb" "$tmp"
  # Debian 12 ships /lib/modules; later releases /usr/lib/modules. depmod -b wants lib/.
  if [ ! -d "$tmp/lib/modules" ] && [ -d "$tmp/usr/lib/modules" ]; then
    ln -s usr/lib "$tmp/lib"
  fi
  kver=$(ls "$tmp/lib/modules" | head -1)
  [ -n "$kver" ] || die "$deb has no lib/modules/<version>"
  [ -f "$tmp/boot/vmlinuz-$kver" ] || die "$deb has no boot/vmlinuz-$kver"
  depmod -b "$tmp" "$kver"
  echo "$kver" >"$tmp/version"
  rm -rf "$dir/kernel"
  mv "$tmp" "$dir/kernel"
  touch "$dir/kernel/stamp"
}

build_initramfs() {
  local dir=$1 kdir="$1/kernel" kver root m base list applet bb
  kver=$(cat "$kdir/version")
  root="$dir/initramfs.tmp"
  rm -rf "$root"
  mkdir -p "$root"/{bin,dev,proc,sys,tmp,hostroot,out,lib/modules}
  bb=$(command -v busybox || true)
  [ -n "$bb" ] || die "busybox not found (package busybox-static)"
  ! ldd "$bb" >/dev/null 2>&1 || die "$bb is dynamically linked: install busybox-static"
  cp "$bb" "$root/bin/busybox"
  for applet in $("$bb" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
  done
  # The kernel opens /dev/console before /init runs; /init also mounts devtmpfs.
  mknod -m 600 "$root/dev/console" c 5 1 2>/dev/null || true
  list=$(modprobe -d "$kdir" -S "$kver" -a --show-depends $MODULES) ||
    die "modprobe --show-depends failed for: $MODULES"
  : >"$root/modules.load"
  for m in $(echo "$list" | awk '$1 == "insmod" && !seen[$2]++ { print $2 }'); do
    base=$(basename "$m")
    case "$base" in
      *.ko) cp "$m" "$root/lib/modules/$base" ;;
      *.ko.xz) base=${base%.xz}; xz -dc "$m" >"$root/lib/modules/$base" ;;
      *.ko.zst) base=${base%.zst}; zstd -qdc "$m" >"$root/lib/modules/$base" ;;
      *.ko.gz) base=${base%.gz}; gzip -dc "$m" >"$root/lib/modules/$base" ;;
      *) die "unexpected module file $m" ;;
    esac
    echo "$base" >>"$root/modules.load"
  done
  for m in $MODULES; do
    grep -q "^${m//-/_}\.ko$" "$root/modules.load" ||
      echo "$list" | grep -q "^builtin ${m//-/_}" ||
      die "module $m not found in $kver"
  done
  echo "$kver" >"$root/kernel-version"
  install -m 755 "$HERE/init" "$root/init"
  # Uncompressed: the emulated CPU would spend longer decompressing than reading it.
  (cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$dir/initramfs.cpio.tmp"
  mv "$dir/initramfs.cpio.tmp" "$dir/initramfs.cpio"
  echo "softroce: initramfs for $kver: $(grep -c . "$root/modules.load") modules, $(du -h "$dir/initramfs.cpio" | cut -f1)"
  rm -rf "$root"
}

case "${1:-}" in
  kernel-id) kernel_id "$2" ;;
  kernel) unpack_kernel "$2" ;;
  initramfs) build_initramfs "$2" ;;
  *) echo "usage: $0 kernel-id FILE | kernel DIR | initramfs DIR" >&2; exit 2 ;;
esac
