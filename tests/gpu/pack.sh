#!/bin/bash
# pack.sh OUT: everything tests/gpu/smoke.sh needs on a bare GPU machine
# (a driver and nothing else: no container engine, no compiler, nothing to
# fetch), built here into the folder OUT, which travels to that machine:
#
#   OUT/smoke.sh   the smoke test; run there as `bash OUT/smoke.sh`
#   OUT/bin/       gpuctk, gpuctk-hook, gpuctk-runtime, gpuctk-device-plugin
#                  (from `make build`), runc (static), ocibundle (static)
#   OUT/rootfs/    the containers' root: busybox, this machine's glibc with
#                  ldconfig and a linker cache whose /etc/ld.so.conf
#                  includes /etc/ld.so.conf.d/*.conf as distributions' do,
#                  and the CUDA programs vadd and probe (driver API, libcuda
#                  loaded with dlopen: the driver's files come from the spec)
#
# Environment: RUNC, a static runc (`make gpu-pack` builds one into
# .cache/tools/runc-static and passes it); BIN, a folder that already holds
# the four gpuctk binaries (default: `make build`, then bin/).
set -euo pipefail

[ $# = 1 ] || { echo "usage: tests/gpu/pack.sh OUT (or: make gpu-pack [GPU_PACK=OUT])" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=$1
runc=${RUNC:-$top/.cache/tools/runc-static}
fail() { echo "pack.sh: $*" >&2; exit 1; }

[ -x "$runc" ] || fail "no static runc at $runc: run \`make gpu-pack\`, which builds one, or set RUNC"
file -L "$runc" | grep -q 'statically linked' || fail "$runc is not statically linked: the GPU machine may lack its libraries"
command -v gcc >/dev/null || fail "gcc not found: it builds vadd and probe (apt-get install gcc)"
busybox=/bin/busybox
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' || fail "no static busybox at $busybox (apt-get install busybox-static)"

if [ -z "${BIN:-}" ]; then
	make -s -C "$top" build >/dev/null
	BIN=$top/bin
fi
for b in gpuctk gpuctk-hook gpuctk-runtime gpuctk-device-plugin; do
	[ -x "$BIN/$b" ] || fail "$BIN/$b not found: run \`make build\` or set BIN"
done

# Built beside OUT and renamed into place: a failed pack leaves the last
# good one.
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
cp "$BIN"/gpuctk "$BIN"/gpuctk-hook "$BIN"/gpuctk-runtime "$BIN"/gpuctk-device-plugin "$tmp/bin/"
cp "$runc" "$tmp/bin/runc"
(cd "$top" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$tmp/bin/ocibundle" ./tests/gpu/ocibundle)
cp "$here/smoke.sh" "$tmp/smoke.sh"

root=$tmp/rootfs
mkdir -p "$root"/{bin,sbin,tmp,etc/ld.so.conf.d,dev,proc,sys,usr/bin,usr/lib}
gcc -std=gnu11 -O2 -o "$root/bin/vadd" "$here/vadd.c" -ldl
gcc -std=gnu11 -O2 -o "$root/bin/probe" "$here/probe.c" -ldl
cp "$busybox" "$root/bin/busybox"
for a in sh ls cat env grep wc echo sleep true head tr; do ln -s busybox "$root/bin/$a"; done
# glibc at this machine's paths (libcuda needs libm, libdl, libpthread,
# librt besides what the programs link), its ldconfig, and a cache.
libdir=$(dirname "$(ldd "$root/bin/vadd" | grep -o '/[^ ]*libc\.so\.6')")
for f in $(ldd "$root/bin/vadd" | grep -o '/[^ ]*') "$libdir"/lib{m,dl,pthread,rt}.so.*; do
	[ -e "$f" ] || continue
	mkdir -p "$root$(dirname "$f")"
	cp -L "$f" "$root$f"
done
cp -L "$(command -v ldconfig || echo /sbin/ldconfig)" "$root/sbin/ldconfig"
printf '%s\ninclude /etc/ld.so.conf.d/*.conf\n' "$libdir" >"$root/etc/ld.so.conf"
ldconfig -r "$root"

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "pack.sh: $out: $(du -sh "$out" | cut -f1); on the GPU machine, from the folder that holds it: bash $out/smoke.sh"
