#!/bin/bash
# Smoke test of gpuctk on a machine with a real NVIDIA GPU and driver (not
# part of `make test`, which checks only its pack and its dry run). It
# generates the spec from NVML into a temporary spec dir, then runs one
# container per way of asking for a device: a whole GPU by index, by UUID,
# `all` and by CDI annotation, a MIG device when a GPU is in MIG mode, a
# time-sliced replica and an MPS replica with a thread percentage and a
# pinned-memory limit. Each runs nvidia-smi -L, a vectorAdd and a probe of
# what its CUDA context is allowed; the MPS row checks that its limits
# hold. Then it times container starts with a GPU over the same container
# without one. It prints a table; exits 1 when a row fails, 2 on bad usage.
#
# Two engines: podman (the CDI names on --device), or, on a bare machine
# with no container engine, gpuctk-runtime over a static runc (`create`,
# `start`, wait, `delete`), the devices asked for as a Kubernetes node or
# docker would: NVIDIA_VISIBLE_DEVICES or a CDI annotation. `make gpu-pack`
# builds everything the bare machine needs into .dev/gpu (binaries, runc,
# a container root with the CUDA programs); there, run `bash
# .dev/gpu/smoke.sh`.
#
# It leaves the host as found: spec, configs, MPS state and containers live
# in a temporary folder; MIG mode, compute mode and clocks are never
# changed (the MPS daemon runs with set-compute-mode = false); the MPS
# daemon is stopped at exit.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: tests/gpu/smoke.sh [--engine podman|runc] [--bin DIR] [--rootfs DIR]
                          [--runs N] [--out DIR] [--system-spec-dir] [--keep]
                          [--simulate PROFILE]

  --engine E         podman, or runc (gpuctk-runtime over runc, for a machine
                     with no container engine); default: runc when the script
                     sits in a pack (bin/runc beside it), else podman
  --bin DIR          where the gpuctk binaries (and, for runc, runc) are
                     (default: the pack's bin/, else bin/ of this checkout)
  --rootfs DIR       the containers' root with vadd and probe (default: the
                     pack's rootfs/, else built here with gcc)
  --runs N           rounds of the start-time comparison (default 10; 0: none)
  --out DIR          also write the table and every container's log there
  --system-spec-dir  podman without --cdi-spec-dir (4.x): write the spec to
                     /var/run/cdi under a vendor of its own, removed at exit
  --keep             keep the work folder (specs, configs, logs)
  --simulate PROFILE dry run without a GPU: generate for a simulated host and
                     print the containers it would run; the start-time
                     baseline (a container without a GPU) still runs

Environment: PODMAN_ARGS, words added before `run` (e.g. "--runtime runc
--cgroup-manager=cgroupfs"); PODMAN_RUN_ARGS, words added after it.
EOF
}

die_usage() {
	echo "smoke.sh: $*" >&2
	echo "Run 'smoke.sh --help' for usage." >&2
	exit 2
}
fail() {
	echo "smoke.sh: $*" >&2
	exit 1
}

self=$(cd "$(dirname "$0")" && pwd)
pack=""
[ -x "$self/bin/runc" ] && [ -d "$self/rootfs" ] && pack=$self
if [ -n "$pack" ]; then
	bindir=$pack/bin engine=runc
else
	bindir=$(cd "$self/../.." && pwd)/bin engine=podman
fi
rootfs_given="" system_spec=0 keep=0 simulate="" runs=10 outdir=""
while [ $# -gt 0 ]; do
	case $1 in
	--engine)
		[ $# -ge 2 ] || die_usage "--engine needs podman or runc"
		case $2 in podman | runc) engine=$2 ;; *) die_usage "--engine $2: want podman or runc" ;; esac
		shift 2
		;;
	--bin)
		[ $# -ge 2 ] || die_usage "--bin needs a folder"
		bindir=$(cd "$2" 2>/dev/null && pwd) || die_usage "--bin $2: no such folder"
		shift 2
		;;
	--rootfs)
		[ $# -ge 2 ] || die_usage "--rootfs needs a folder"
		rootfs_given=$(cd "$2" 2>/dev/null && pwd) || die_usage "--rootfs $2: no such folder"
		shift 2
		;;
	--runs)
		[ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || die_usage "--runs needs a number of rounds"
		runs=$2
		shift 2
		;;
	--out)
		[ $# -ge 2 ] || die_usage "--out needs a folder"
		outdir=$2
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
[ -n "$rootfs_given" ] || { [ -z "$pack" ] || rootfs_given=$pack/rootfs; }

need=(gpuctk gpuctk-hook)
[ "$engine" = podman ] || need+=(gpuctk-runtime runc ocibundle)
for b in "${need[@]}"; do
	[ -x "$bindir/$b" ] || fail "$bindir/$b not found: run \`make build\` (\`make gpu-pack\` for the runc engine) or give --bin DIR"
done
gpuctk=$bindir/gpuctk
[ "$(id -u)" = 0 ] || [ -n "$simulate" ] || fail "needs root: containers get the GPU's device nodes, and MPS mounts a tmpfs"
if [ "$engine" = podman ]; then
	[ -n "$simulate" ] || command -v podman >/dev/null || fail "podman not found: install it, or use --engine runc with a pack (make gpu-pack)"
else
	[ "$(id -u)" = 0 ] || fail "needs root: runc runs the containers"
	[ -d /sys/fs/cgroup ] && [ -n "$(ls /sys/fs/cgroup 2>/dev/null)" ] || fail "no cgroup file system at /sys/fs/cgroup: runc needs one"
fi
if [ -z "$simulate" ]; then
	[ -e /proc/driver/nvidia/version ] || fail "the NVIDIA kernel module is not loaded (no /proc/driver/nvidia/version)"
fi
if [ -z "$rootfs_given" ] && [ -z "$simulate" ]; then
	command -v gcc >/dev/null || fail "gcc not found: it builds the CUDA programs (or give --rootfs, or run from a pack: make gpu-pack)"
fi

work=$(mktemp -d /tmp/gpuctk-smoke.XXXXXX)
specdir=$work/cdi
mkdir -p "$specdir" "$work/logs"
vendor=nvidia.com
podman_cdi=()
system_spec_file=""
if [ "$engine" = podman ] && [ -z "$simulate" ]; then
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
runc_root=$work/runc

cleanup() {
	if [ -n "${mps_config:-}" ]; then
		"$gpuctk" mps stop --config "$mps_config" >>"$work/logs/mps.log" 2>&1 || echo "smoke.sh: gpuctk mps stop failed: see $work/logs/mps.log" >&2
	fi
	if [ -d "$runc_root" ]; then
		local id
		for id in $("$bindir/runc" --root "$runc_root" list -q 2>/dev/null); do
			"$bindir/runc" --root "$runc_root" delete -f "$id" >/dev/null 2>&1 || true
		done
	fi
	[ -z "$system_spec_file" ] || rm -f "$system_spec_file"
	if [ -n "$outdir" ]; then
		mkdir -p "$outdir" && cp -r "$work/logs/." "$outdir/" 2>/dev/null || true
	fi
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

# config writes a gpuctk config for one phase: sharing (may be empty), a
# state root and runtime cache of the smoke test's own, never the host's.
config() {
	local name=$1 sharing=$2
	cat >"$work/$name.toml" <<EOF
[cdi]
vendor = "$vendor"
hook-path = "$bindir/gpuctk-hook"
spec-dirs = ["$specdir"]

[runtime]
runtimes = ["$bindir/runc"]
log-file = "$work/logs/runtime.log"
cache-dir = "$work/runtime-cache"

[mps]
state-root = "$work/mps"
set-compute-mode = false
$sharing
EOF
	echo "$work/$name.toml"
}

# generate writes the spec of a phase where the engine reads it.
generate() {
	local cfg=$1
	"$gpuctk" cdi generate --quiet --config "$cfg" "${host_args[@]}" --output "$specdir/nvidia.yaml"
	[ -z "$system_spec_file" ] || cp "$specdir/nvidia.yaml" "$system_spec_file"
	# The spec just written must be fresh: cdi check runs on real files.
	if [ -z "$simulate" ]; then
		"$gpuctk" cdi check --quiet --config "$cfg" >"$work/logs/check.log" 2>&1 ||
			fail "cdi check finds the spec just written stale: $(cat "$work/logs/check.log")"
	fi
	names=$("$gpuctk" cdi list --config "$cfg" 2>/dev/null | awk 'NR > 1 {print $1}')
}
has() { grep -qx "$kind=$1" <<<"$names"; }

base=$(config base "")
generate "$base"

# Which GPUs are in MIG mode, from gpuctk's own view (NVML or the profile):
# `gpuctk info` lists each GPU as "  INDEX  NAME  UUID  MEMORY[  MIG: ...]".
whole="" mig="" uuid=""
while read -r idx _ rest; do
	case $rest in
	*"MIG:"*) [ -n "$mig" ] || mig=$idx ;;
	*) [ -n "$whole" ] || { whole=$idx; uuid=$(grep -o 'GPU-[0-9a-f-]*' <<<"$rest" | head -1); } ;;
	esac
done < <("$gpuctk" info --config "$base" "${host_args[@]}" 2>/dev/null | grep -E '^  [0-9]+ ')

# The device to share: a whole GPU, else the first MIG device.
shared=""
if [ -n "$whole" ]; then
	shared=$whole
elif has mig-0; then
	shared="mig-0"
fi

# The containers' root: from the pack, or built here (the host's shell
# and glibc with a linker cache, and the CUDA programs).
rootfs=$work/rootfs
build_rootfs() {
	mkdir -p "$rootfs"/{bin,tmp,etc,dev,proc,sys}
	# gnu11: the unprototyped pointer type means "no arguments" in C23.
	gcc -std=gnu11 -O2 -o "$rootfs/bin/vadd" "$self/vadd.c" -ldl
	gcc -std=gnu11 -O2 -o "$rootfs/bin/probe" "$self/probe.c" -ldl
	local f libdir
	cp /bin/sh "$rootfs/bin/sh"
	for f in true cat env grep; do cp "$(command -v $f)" "$rootfs/bin/$f"; done
	libdir=$(dirname "$(ldd /bin/sh | grep -o '/[^ ]*libc\.so\.6')")
	for f in $(ldd /bin/sh "$rootfs"/bin/* | grep -o '/[^ ]*') "$libdir"/lib{m,dl,pthread,rt}.so.*; do
		if [[ $f == /* ]] && [ -e "$f" ]; then
			mkdir -p "$rootfs$(dirname "$f")"
			cp -L "$f" "$rootfs$f"
		fi
	done
	printf '%s\ninclude /etc/ld.so.conf.d/*.conf\n' "$libdir" >"$rootfs/etc/ld.so.conf"
	mkdir -p "$rootfs/etc/ld.so.conf.d"
	ldconfig -r "$rootfs"
}
if [ -n "$rootfs_given" ]; then
	cp -a "$rootfs_given" "$rootfs"
elif [ -z "$simulate" ]; then
	build_rootfs
fi

# What each container runs: the driver's nvidia-smi from the spec, where an
# image's PATH finds it; the vectorAdd; the probe (SMs, memory, and a
# 512 MiB and a 2048 MiB allocation: an MPS replica limited to 1 GiB of
# pinned memory must refuse the second).
inside='PATH=/usr/bin:/bin:/usr/sbin:/sbin; nvidia-smi -L; echo "@@smi=$?"; /bin/vadd; echo "@@cuda=$?"; /bin/probe 512 2048; echo "@@probe=$?"'

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# runc_container ID CONFIG CMD [REQUEST...]: a fresh bundle of the root,
# then create through gpuctk-runtime (the only step it edits), start, wait
# for the process to end, delete; REQUEST is env:K=V or ann:K=V; CONFIG ""
# runs plain runc. Output in $work/logs/ID.log, wall time in $took.
runc_container() {
	local id=$1 cfg=$2 cmd=$3 rt=$bindir/runc b=$work/bundles/$1 start i r
	shift 3
	local edit=()
	for r in "$@"; do
		case $r in
		env:*) edit+=(-env "${r#env:}") ;;
		ann:*) edit+=(-annotation "${r#ann:}") ;;
		esac
	done
	[ -z "$cfg" ] || rt=$bindir/gpuctk-runtime
	rm -rf "$b" && mkdir -p "$b" "$runc_root"
	cp -a "$rootfs" "$b/rootfs"
	(cd "$b" && "$bindir/runc" spec) && "$bindir/ocibundle" -bundle "$b" "${edit[@]}" -- /bin/sh -c "$cmd" || return 1
	start=$(date +%s%N)
	if ! GPUCTK_CONFIG=$cfg "$rt" --root "$runc_root" create --bundle "$b" "$id" >"$work/logs/$id.log" 2>&1 </dev/null; then
		took=$(ms_since "$start")
		"$bindir/runc" --root "$runc_root" delete -f "$id" >/dev/null 2>&1 || true
		return 1
	fi
	"$bindir/runc" --root "$runc_root" start "$id" || return 1
	for i in $(seq 1 12000); do
		"$bindir/runc" --root "$runc_root" state "$id" 2>/dev/null | grep -q '"status": *"stopped"' && break
		sleep 0.005
	done
	took=$(ms_since "$start")
	"$bindir/runc" --root "$runc_root" delete -f "$id" >/dev/null 2>&1
}

# podman_container ID CMD [--device NAME | --runtime-annotation NAME]: as
# runc_container, through podman.
podman_container() {
	local id=$1 cmd=$2 start
	shift 2
	local ask=()
	case ${1:-} in
	--device) ask=(--device "$2") ;;
	--annotation) ask=(--runtime "$bindir/gpuctk-runtime" --annotation "cdi.k8s.io/gpuctk-smoke=$2") ;;
	esac
	# PODMAN_ARGS and PODMAN_RUN_ARGS are lists of words.
	# shellcheck disable=SC2206
	local c=(podman "${podman_cdi[@]}" ${PODMAN_ARGS:-} run --rm --network=none ${PODMAN_RUN_ARGS:-}
		"${ask[@]}" --rootfs "$rootfs" /bin/sh -c "$cmd")
	start=$(date +%s%N)
	GPUCTK_CONFIG=$cur_config "${c[@]}" >"$work/logs/$id.log" 2>&1
	local rc=$?
	took=$(ms_since "$start")
	return $rc
}

rows=()
failed=0
n=0
cur_config=$base
# row LABEL NAME HOW: one container asking for NAME (a CDI name of the
# spec) HOW: "device" (podman --device; NVIDIA_VISIBLE_DEVICES for runc),
# "annotation" (a CDI annotation). Sets probe_sms and probe_allocs.
row() {
	local label=$1 name=$2 how=$3 id smi cuda probe ask out
	n=$((n + 1))
	id=row$n
	probe_sms="" probe_allocs="" took=-
	if [ "$name" != all ] && ! has "$name"; then
		rows+=("$label|$kind=$name|not in the spec|FAIL|-|-|-")
		failed=1
		return
	fi
	case $engine/$how in
	runc/device) ask="NVIDIA_VISIBLE_DEVICES=$name" ;;
	runc/annotation) ask="annotation cdi.k8s.io/gpuctk-smoke=$kind=$name" ;;
	podman/device) ask="--device $kind=$name" ;;
	podman/annotation) ask="annotation cdi.k8s.io/gpuctk-smoke=$kind=$name" ;;
	esac
	if [ -n "$simulate" ]; then
		echo "dry run: $engine container asking $ask, running: $inside"
		rows+=("$label|$ask|dry run|-|-|-|-")
		return
	fi
	local ok=0
	case $engine/$how in
	runc/device) runc_container "$id" "$cur_config" "$inside" "env:NVIDIA_VISIBLE_DEVICES=$name" && ok=1 ;;
	runc/annotation) runc_container "$id" "$cur_config" "$inside" "ann:cdi.k8s.io/gpuctk-smoke=$kind=$name" && ok=1 ;;
	podman/device) podman_container "$id" "$inside" --device "$kind=$name" && ok=1 ;;
	podman/annotation) podman_container "$id" "$inside" --annotation "$kind=$name" && ok=1 ;;
	esac
	out=$(cat "$work/logs/$id.log")
	smi=FAIL cuda=FAIL probe=FAIL
	if grep -q '^@@smi=0$' <<<"$out"; then smi="ok ($(grep -c '^ *\(GPU\|MIG\) ' <<<"$out") lines)"; fi
	if grep -q '^@@cuda=0$' <<<"$out"; then cuda=ok; fi
	if grep -q '^@@probe=0$' <<<"$out"; then
		probe_sms=$(sed -n 's/^probe: sms=\([0-9]*\) .*/\1/p' <<<"$out")
		probe_allocs=$(sed -n 's/^probe: alloc \([0-9]*\) -> \([0-9]*\)$/\1:\2/p' <<<"$out" | tr '\n' ' ')
		probe="$probe_sms SMs"
	fi
	if [ $ok = 0 ] || [ "$smi" = FAIL ] || [ "$cuda" = FAIL ] || [ "$probe" = FAIL ]; then
		failed=1
		echo "--- $label ($ask) failed:" >&2
		tail -n 20 <<<"$out" >&2
	fi
	rows+=("$label|$ask|ran|$smi|$cuda|$probe|${took} ms")
}

whole_sms=""
if [ -n "$whole" ]; then
	row "whole GPU, index" "$whole" device
	whole_sms=$probe_sms
	if [ -n "$uuid" ]; then row "whole GPU, UUID" "$uuid" device; else rows+=("whole GPU, UUID|-|no UUID in gpuctk info|FAIL|-|-|-"); failed=1; fi
	row "whole GPU, annotation" "$whole" annotation
else
	rows+=("whole GPU|-|skipped: every GPU is in MIG mode|-|-|-|-")
fi
row "all GPUs" all device
if [ -n "$mig" ] && has mig-0; then row "MIG device" mig-0 device; else rows+=("MIG device|-|skipped: no GPU in MIG mode|-|-|-|-"); fi

if [ -n "$shared" ]; then
	cur_config=$(config time-sliced "
[[sharing]]
devices = [\"$shared\"]
strategy = \"time-slicing\"
replicas = 2")
	generate "$cur_config"
	row "time-sliced replica" "$shared::1" device

	cur_config=$(config mps "
[[sharing]]
devices = [\"$shared\"]
strategy = \"mps\"
replicas = 2
active-thread-percentage = 25
pinned-memory-limit = \"1GiB\"")
	generate "$cur_config"
	if [ -n "$simulate" ]; then
		echo "dry run: $gpuctk mps start --config $cur_config"
	else
		mps_config=$cur_config
		"$gpuctk" mps start --config "$cur_config" >"$work/logs/mps.log" 2>&1 || { cat "$work/logs/mps.log" >&2; fail "gpuctk mps start failed"; }
	fi
	row "MPS replica (25%, 1 GiB)" "$shared::1" device
	if [ -z "$simulate" ]; then
		# The limits, as the client's CUDA context sees them.
		limits="MPS limits: SMs $probe_sms of ${whole_sms:-?}, allocations (MiB:result) $probe_allocs"
		if [ -z "$probe_sms" ] || [[ " $probe_allocs" != *" 512:0 "* ]] || [[ " $probe_allocs" == *" 2048:0 "* ]] ||
			{ [ -n "$whole_sms" ] && [ "$probe_sms" -gt $(((whole_sms + 3) / 4 + 1)) ]; }; then
			rows+=("MPS limits|25% threads, 1 GiB pinned|checked|-|-|FAIL|-")
			echo "--- $limits: want at most a quarter of the SMs, 512 MiB granted and 2048 MiB refused" >&2
			failed=1
		else
			rows+=("MPS limits|25% threads, 1 GiB pinned|checked|-|-|$probe_sms SMs, 2 GiB refused|-")
		fi
	fi
	cur_config=$base
	generate "$base"
else
	rows+=("time-sliced replica|-|skipped: no device to share|-|-|-|-" "MPS replica|-|skipped: no device to share|-|-|-|-")
fi

table() {
	awk -F'|' '{ for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n = NR; nf = NF }
	END { for (r = 1; r <= n; r++) { line = ""; for (i = 1; i <= nf; i++) line = line sprintf("%-" w[i] + 2 "s", cell[r, i]); sub(/ +$/, "", line); print line } }'
}
median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# Start time: the same container (/bin/true) without a GPU and with one,
# interleaved, each round from a fresh copy of the root (the hook writes
# the linker cache and links into it).
timing=()
if [ "$runs" -gt 0 ] && { [ -n "$rootfs_given" ] || [ -z "$simulate" ]; }; then
	[ -d "$rootfs" ] || cp -a "$rootfs_given" "$rootfs"
	gpu=${whole:-mig-0}
	plain_ms="" gpu_ms=""
	for i in $(seq 1 "$runs"); do
		if [ "$engine" = runc ]; then
			runc_container "plain$i" "" /bin/true || fail "a plain runc container failed: $(tail -3 "$work/logs/plain$i.log")"
			plain_ms+=" $took"
			[ -n "$simulate" ] && continue
			runc_container "gpu$i" "$base" /bin/true "env:NVIDIA_VISIBLE_DEVICES=$gpu" || fail "a container with GPU $gpu failed: $(tail -3 "$work/logs/gpu$i.log")"
			gpu_ms+=" $took"
		else
			[ -n "$simulate" ] && break
			podman_container "plain$i" /bin/true || fail "a plain podman container failed: $(tail -3 "$work/logs/plain$i.log")"
			plain_ms+=" $took"
			podman_container "gpu$i" /bin/true --device "$kind=$gpu" || fail "a podman container with $kind=$gpu failed: $(tail -3 "$work/logs/gpu$i.log")"
			gpu_ms+=" $took"
		fi
	done
	p=$(median <<<"$plain_ms")
	if [ -n "$gpu_ms" ]; then
		g=$(median <<<"$gpu_ms")
		timing=("start, no GPU|$engine|$runs rounds|-|-|-|$p ms median" "start, GPU $gpu|$engine|$runs rounds|-|-|-|$g ms median (+$(awk -v a="$g" -v b="$p" 'BEGIN { print a - b }') ms)")
	elif [ -n "$plain_ms" ]; then
		timing=("start, no GPU|$engine|$runs rounds|-|-|-|$p ms median")
	fi
fi

result=$(printf '%s\n' "KIND|REQUEST|RUN|NVIDIA-SMI|CUDA|PROBE|TIME" "${rows[@]}" "${timing[@]}" | table)
echo "$result"
[ -z "$outdir" ] || { mkdir -p "$outdir" && echo "$result" >"$outdir/table.txt"; }
if [ "$failed" = 1 ]; then
	echo "smoke.sh: some rows failed (logs above; --keep keeps $work)" >&2
	exit 1
fi
