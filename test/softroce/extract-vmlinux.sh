#!/bin/bash
# extract-vmlinux.sh VMLINUZ OUT: writes the uncompressed ELF kernel inside an x86 bzImage.
# qemu boots the ELF through its PVH entry point, which skips the bzImage's own
# decompressor: under emulation that saves a few seconds per boot.
# The payload is located by the boot protocol header (Documentation/x86/boot.rst):
#   0x1f1 setup_sects (0 means 4), 0x248 payload_offset, 0x24c payload_length;
# the payload offset counts from the protected-mode code at (setup_sects + 1) * 512.
set -euo pipefail
in=$1 out=$2

u() { od -An -t "u$2" -j "$1" -N "$2" "$in" | tr -d ' '; }

[ "$(od -An -c -j $((0x202)) -N 4 "$in" | tr -d ' ')" = HdrS ] || {
  echo "$in: not a bzImage (no HdrS signature)" >&2; exit 1; }
sects=$(u $((0x1f1)) 1)
[ "$sects" -eq 0 ] && sects=4
off=$(( (sects + 1) * 512 + $(u $((0x248)) 4) ))
len=$(u $((0x24c)) 4)
magic=$(od -An -t x1 -j "$off" -N 6 "$in" | tr -d ' ')
case "$magic" in
  fd377a585a00) dec="xz -dc --single-stream" ;;
  1f8b*) dec="gzip -dc" ;;
  28b52ffd*) dec="zstd -qdc" ;;
  *) echo "$in: payload compression with magic $magic not handled" >&2; exit 1 ;;
esac
# The payload ends with 4 bytes of decompressed size that the decompressors may call
# trailing garbage: judge the result by its ELF header, not by their exit status.
tail -c +$((off + 1)) "$in" | head -c "$len" | $dec >"$out.tmp" 2>/dev/null || true
[ "$(od -An -c -N 4 "$out.tmp" | tr -d ' ')" = 177ELF ] || {
  rm -f "$out.tmp"; echo "$in: payload did not decompress to an ELF image" >&2; exit 1; }
mv "$out.tmp" "$out"
