#!/bin/bash
# Smoke test of gpuctk on a machine with a real NVIDIA GPU and driver (not
# part of `make test`): generates the spec from NVML into a temporary spec
# dir, then for each kind of device name (a whole GPU, a MIG device when a
# GPU is in MIG mode, a time-sliced replica, an MPS replica) runs a podman
# container that runs nvidia-smi -L and a small CUDA program (vectorAdd on
# the driver API, loaded with dlopen, so no CUDA toolkit is needed), and
# prints a table. Exits 1 when any row fails, 2 on bad usage.
#
# It leaves the host as found: the spec lives in a temporary folder (podman
# 4.x without --cdi-spec-dir needs --system-spec-dir: a spec of a vendor of
# its own in /var/run/cdi, removed at exit); MIG mode and compute modes are
# never changed; the MPS daemon runs from a temporary state root and is
# stopped at exit.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: tests/gpu/smoke.sh [--bin DIR] [--system-spec-dir] [--keep] [--simulate PROFILE]

  --bin DIR          where gpuctk and gpuctk-hook are (default: bin/ of this
                     checkout; run `make build` first)
  --system-spec-dir  when podman has no --cdi-spec-dir (podman 4.x), write the
                     spec to /var/run/cdi under a vendor of its own, removed
                     at exit
  --keep             keep the work folder (specs, configs, logs)
  --simulate PROFILE dry run without a GPU: generate for a simulated host
                     (an embedded profile or a profile file) and print the
                     containers it would run instead of running them

Environment: PODMAN_ARGS, words added before `run` (e.g. "--runtime runc
--cgroup-manager=cgroupfs"); PODMAN_RUN_ARGS, words added after it.
EOF
}

die_usage() {
	echo "smoke.sh: $*" >&2
	echo "Run 'tests/gpu/smoke.sh --help' for usage." >&2
	exit 2
}

here=$(cd "$(dirname "$0")/../.." && pwd)
bindir=$here/bin
system_spec=0
keep=0
simulate=""
while [ $# -gt 0 ]; do
	case $1 in
	--bin)
		[ $# -ge 2 ] || die_usage "--bin needs a folder"
		bindir=$(cd "$2" 2>/dev/null && pwd) || die_usage "--bin $2: no such folder"
		shift 2
		;;
	--system-spec-dir) system_spec=1; shift ;;
	--keep) keep=1; shift ;;
	--simulate)
		[ $# -ge 2 ] || die_usage "--simulate needs a profile name or file"
		simulate=$2
		shift 2
		;;
	-h | --help) usage; exit 0 ;;
	*) die_usage "unknown argument \"$1\"" ;;
	esac
done

fail() {
	echo "smoke.sh: $*" >&2
	exit 1
}

for b in gpuctk gpuctk-hook; do
	[ -x "$bindir/$b" ] || fail "$bindir/$b not found: run \`make build\` or give --bin DIR"
done
gpuctk=$bindir/gpuctk
if [ -z "$simulate" ]; then
	[ "$(id -u)" = 0 ] || fail "needs root: podman must give containers the GPU's device nodes, and MPS mounts a tmpfs"
	command -v podman >/dev/null || fail "podman not found: install it (apt-get install podman)"
	command -v gcc >/dev/null || fail "gcc not found: it builds the CUDA test program (apt-get install gcc)"
	command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: install the NVIDIA driver"
	[ -e /proc/driver/nvidia/version ] || fail "the NVIDIA kernel module is not loaded (no /proc/driver/nvidia/version)"
fi

work=$(mktemp -d /tmp/gpuctk-smoke.XXXXXX)
specdir=$work/cdi
mkdir -p "$specdir"
vendor=nvidia.com
podman_cdi=()
system_spec_file=""
if [ -z "$simulate" ]; then
	if podman --help 2>/dev/null | grep -q -- --cdi-spec-dir; then
		podman_cdi=(--cdi-spec-dir "$specdir")
	elif [ "$system_spec" = 1 ]; then
		# A vendor of its own: the host's nvidia.com spec is not touched,
		# and no name of this spec clashes with it.
		vendor=gpuctk-smoke-$$.example.com
		system_spec_file=/var/run/cdi/$vendor.yaml
	else
		rm -rf "$work"
		fail "podman $(podman --version | awk '{print $3}') has no --cdi-spec-dir: give --system-spec-dir to write the spec to /var/run/cdi under a vendor of its own (removed at exit)"
	fi
fi
kind=$vendor/gpu

cleanup() {
	if [ -n "${mps_config:-}" ]; then
		"$gpuctk" mps stop --config "$mps_config" >>"$work/mps.log" 2>&1 || echo "smoke.sh: gpuctk mps stop failed: see $work/mps.log" >&2
	fi
	[ -z "$system_spec_file" ] || rm -f "$system_spec_file"
	if [ "$keep" = 1 ]; then
		echo "smoke.sh: work folder kept: $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

host_args=()
[ -z "$simulate" ] || host_args=(--simulate "$simulate")

# config writes a gpuctk config for one phase: sharing (may be empty) and a
# state root of the smoke test's own, never the host's.
config() {
	local name=$1 sharing=$2
	cat >"$work/$name.toml" <<EOF
[cdi]
vendor = "$vendor"
hook-path = "$bindir/gpuctk-hook"
spec-dirs = ["$specdir"]

[mps]
state-root = "$work/mps"
set-compute-mode = false
$sharing
EOF
	echo "$work/$name.toml"
}

# generate writes the spec of a phase where podman reads it.
generate() {
	local cfg=$1
	"$gpuctk" cdi generate --quiet --config "$cfg" "${host_args[@]}" --output "$specdir/nvidia.yaml"
	[ -z "$system_spec_file" ] || cp "$specdir/nvidia.yaml" "$system_spec_file"
	# The spec just written must be fresh: cdi check runs on real files.
	"$gpuctk" cdi check --quiet --config "$cfg" "${host_args[@]}" >"$work/check.log" 2>&1 ||
		fail "cdi check finds the spec just written stale: $(cat "$work/check.log")"
	names=$("$gpuctk" cdi list --config "$cfg" 2>/dev/null | awk 'NR > 1 {print $1}')
}
has() { grep -qx "$kind=$1" <<<"$names"; }

base=$(config base "")
generate "$base"

# Which GPUs are in MIG mode, from gpuctk's own view (NVML or the profile):
# `gpuctk info` lists each GPU as "  INDEX  NAME  UUID  MEMORY[  MIG: ...]".
whole="" mig=""
while read -r idx rest; do
	case $rest in
	*"MIG:"*) [ -n "$mig" ] || mig=$idx ;;
	*) [ -n "$whole" ] || whole=$idx ;;
	esac
done < <("$gpuctk" info --config "$base" "${host_args[@]}" 2>/dev/null | grep -E '^  [0-9]+ ')

# The device to share: a whole GPU, else the first MIG device.
shared=""
if [ -n "$whole" ]; then
	shared=$whole
elif has mig-0; then
	shared="mig-0"
fi

# The root file system of the containers: a shell, glibc with its linker
# cache, and the CUDA test program; the driver's files come from the spec.
rootfs=$work/rootfs
build_rootfs() {
	mkdir -p "$rootfs"/{bin,tmp,etc,dev,proc,sys}
	cat >"$work/vadd.c" <<'EOF'
/* vectorAdd on the CUDA driver API, libcuda loaded with dlopen: no CUDA
   toolkit needed to build it. The kernel is PTX, JIT-compiled by the
   driver (libnvidia-ptxjitcompiler, which the spec mounts). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static const char *ptx =
	".version 6.0\n.target sm_50\n.address_size 64\n"
	".visible .entry vadd(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 pn)\n{\n"
	".reg .pred %p<2>;\n.reg .b32 %r<6>;\n.reg .f32 %f<4>;\n.reg .b64 %rd<11>;\n"
	"ld.param.u64 %rd1, [pa];\nld.param.u64 %rd2, [pb];\nld.param.u64 %rd3, [pc];\nld.param.u32 %r2, [pn];\n"
	"mov.u32 %r3, %ctaid.x;\nmov.u32 %r4, %ntid.x;\nmov.u32 %r5, %tid.x;\nmad.lo.s32 %r1, %r3, %r4, %r5;\n"
	"setp.ge.s32 %p1, %r1, %r2;\n@%p1 bra DONE;\n"
	"cvta.to.global.u64 %rd4, %rd1;\ncvta.to.global.u64 %rd5, %rd2;\ncvta.to.global.u64 %rd6, %rd3;\n"
	"mul.wide.s32 %rd7, %r1, 4;\nadd.s64 %rd8, %rd4, %rd7;\nadd.s64 %rd9, %rd5, %rd7;\nadd.s64 %rd10, %rd6, %rd7;\n"
	"ld.global.f32 %f1, [%rd8];\nld.global.f32 %f2, [%rd9];\nadd.f32 %f3, %f1, %f2;\nst.global.f32 [%rd10], %f3;\n"
	"DONE:\nret;\n}\n";

typedef int (*fn)();
static void *cuda;
static fn get(const char *name) {
	fn f = (fn)dlsym(cuda, name);
	if (!f) { fprintf(stderr, "CUDA: %s not in libcuda.so.1\n", name); exit(1); }
	return f;
}
#define CHECK(call) do { int r_ = (call); if (r_) { const char *s_ = "?"; \
	get("cuGetErrorString")(r_, &s_); fprintf(stderr, "CUDA: %s: error %d: %s\n", #call, r_, s_); return 1; } } while (0)

int main(void) {
	enum { N = 1 << 20 };
	cuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!cuda) { fprintf(stderr, "CUDA: %s\n", dlerror()); return 1; }
	int dev, count = 0;
	void *ctx, *mod, *fun;
	unsigned long long da, db, dc;
	char name[128] = "";
	CHECK(get("cuInit")(0));
	CHECK(get("cuDeviceGetCount")(&count));
	if (count < 1) { fprintf(stderr, "CUDA: no device\n"); return 1; }
	CHECK(get("cuDeviceGet")(&dev, 0));
	CHECK(get("cuDeviceGetName")(name, (int)sizeof name, dev));
	CHECK(get("cuCtxCreate_v2")(&ctx, 0, dev));
	CHECK(get("cuModuleLoadData")(&mod, ptx));
	CHECK(get("cuModuleGetFunction")(&fun, mod, "vadd"));
	float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
	for (int i = 0; i < N; i++) { a[i] = i; b[i] = 2 * i; c[i] = 0; }
	CHECK(get("cuMemAlloc_v2")(&da, (size_t)N * 4));
	CHECK(get("cuMemAlloc_v2")(&db, (size_t)N * 4));
	CHECK(get("cuMemAlloc_v2")(&dc, (size_t)N * 4));
	CHECK(get("cuMemcpyHtoD_v2")(da, a, (size_t)N * 4));
	CHECK(get("cuMemcpyHtoD_v2")(db, b, (size_t)N * 4));
	unsigned n = N;
	void *args[] = {&da, &db, &dc, &n};
	CHECK(get("cuLaunchKernel")(fun, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CHECK(get("cuCtxSynchronize")());
	CHECK(get("cuMemcpyDtoH_v2")(c, dc, (size_t)N * 4));
	for (int i = 0; i < N; i++)
		if (c[i] != 3.0f * i) { fprintf(stderr, "CUDA: c[%d] = %g, want %g\n", i, c[i], 3.0 * i); return 1; }
	CHECK(get("cuCtxDestroy_v2")(ctx));
	printf("vectorAdd of %d floats on %s: ok\n", N, name);
	return 0;
}
EOF
	# gnu11: the unprototyped pointer type above means "no arguments" in C23.
	gcc -std=gnu11 -O2 -o "$rootfs/bin/vadd" "$work/vadd.c" -ldl
	# The shell and glibc (libcuda needs libm, libdl, libpthread, librt),
	# at the host's paths, and a linker cache of them: the hook adds the
	# driver's libraries to it.
	local f libdir
	cp /bin/sh "$rootfs/bin/sh"
	libdir=$(dirname "$(ldd /bin/sh | grep -o '/[^ ]*libc\.so\.6')")
	for f in $(ldd /bin/sh; ldd "$rootfs/bin/vadd") "$libdir"/lib{m,dl,pthread,rt}.so.*; do
		if [[ $f == /* ]] && [ -e "$f" ]; then
			mkdir -p "$rootfs$(dirname "$f")"
			cp -L "$f" "$rootfs$f"
		fi
	done
	echo "$libdir" >"$rootfs/etc/ld.so.conf"
	ldconfig -r "$rootfs"
}
[ -n "$simulate" ] || build_rootfs

rows=()
failed=0
# run_row runs one container with a device name and adds its row.
run_row() {
	local label=$1 name=$2 smi cuda start ms out
	if ! has "$name"; then
		rows+=("$label|$kind=$name|not in the spec|FAIL|-|-")
		failed=1
		return
	fi
	# PODMAN_ARGS and PODMAN_RUN_ARGS are lists of words.
	# shellcheck disable=SC2206
	local cmd=(podman "${podman_cdi[@]}" ${PODMAN_ARGS:-} run --rm --network=none ${PODMAN_RUN_ARGS:-}
		--device "$kind=$name" --rootfs "$rootfs" /bin/sh -c 'nvidia-smi -L; echo "@@smi=$?"; /bin/vadd; echo "@@cuda=$?"')
	if [ -n "$simulate" ]; then
		echo "dry run: $(printf '%q ' "${cmd[@]}")"
		rows+=("$label|$kind=$name|dry run|-|-|-")
		return
	fi
	start=$(date +%s%N)
	out=$("${cmd[@]}" 2>&1) || true
	ms=$((($(date +%s%N) - start) / 1000000))
	printf '%s\n' "$out" >"$work/$label.log"
	smi=FAIL cuda=FAIL
	if grep -q '^@@smi=0$' <<<"$out"; then smi="ok ($(grep -c '^ *\(GPU\|MIG\) ' <<<"$out") lines)"; fi
	if grep -q '^@@cuda=0$' <<<"$out"; then cuda=ok; fi
	if [ "$smi" = FAIL ] || [ "$cuda" = FAIL ]; then
		failed=1
		echo "--- $label ($kind=$name) failed:" >&2
		printf '%s\n' "$out" | tail -n 20 >&2
	fi
	rows+=("$label|$kind=$name|ran|$smi|$cuda|${ms} ms")
}

if [ -n "$whole" ]; then run_row "full GPU" "$whole"; else rows+=("full GPU|-|skipped: every GPU is in MIG mode|-|-|-"); fi
if [ -n "$mig" ] && has mig-0; then run_row "MIG device" mig-0; else rows+=("MIG device|-|skipped: no GPU in MIG mode|-|-|-"); fi

if [ -n "$shared" ]; then
	ts=$(config time-sliced "
[[sharing]]
devices = [\"$shared\"]
strategy = \"time-slicing\"
replicas = 2")
	generate "$ts"
	run_row "time-sliced replica" "$shared::1"

	mps=$(config mps "
[[sharing]]
devices = [\"$shared\"]
strategy = \"mps\"
replicas = 2")
	generate "$mps"
	if [ -n "$simulate" ]; then
		echo "dry run: $gpuctk mps start --config $mps"
	else
		mps_config=$mps
		"$gpuctk" mps start --config "$mps" >"$work/mps.log" 2>&1 || { cat "$work/mps.log" >&2; fail "gpuctk mps start failed"; }
	fi
	run_row "MPS replica" "$shared::1"
else
	rows+=("time-sliced replica|-|skipped: no device to share|-|-|-" "MPS replica|-|skipped: no device to share|-|-|-")
fi

# The table, columns as wide as their widest cell.
{
	echo "KIND|DEVICE NAME|RUN|NVIDIA-SMI|CUDA|TIME"
	printf '%s\n' "${rows[@]}"
} | awk -F'|' '{ for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n = NR; nf = NF }
	END { for (r = 1; r <= n; r++) { line = ""; for (i = 1; i <= nf; i++) line = line sprintf("%-" w[i] + 2 "s", cell[r, i]); sub(/ +$/, "", line); print line } }'
if [ "$failed" = 1 ]; then
	echo "smoke.sh: some rows failed (logs above; --keep keeps $work)" >&2
	exit 1
fi
