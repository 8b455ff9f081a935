#!/usr/bin/env bash
# run-standalone.sh WORKDIR BINDIR [COMMAND [ARG...]]
#
# Runs containerd (CRI, CDI) and a standalone kubelet (no API server: static
# pods from WORKDIR/manifests) in private mount, network and PID namespaces,
# so the host keeps its /var/lib/kubelet, /run, /var/log, sysctls, iptables
# and ports.
# BINDIR holds containerd, ctr, containerd-shim-runc-v2 and kubelet
# (KUBELET=PATH overrides the last; CONTAINERD=PATH and CONTAINERD_CONFIG=TEMPLATE
# run another containerd, e.g. 1.7 with containerd-1.7-config.toml.in and
# SHIM_PATH=the folder of its own containerd-shim-runc-v2; KUBELET_V=N sets its log level, default
# 2; KUBELET_ARGS adds flags, e.g. --node-labels=nvidia.com/gpu.present=true; IMAGES=ARCHIVE...
# imports more OCI archives, space-separated, beside the pause and busybox images). Needs root, util-linux (unshare, nsenter, setpriv, flock), iproute2,
# busybox-static, and runc on PATH (the shim runs it). The environment is
# passed on to containerd, and so to the shim and runtime (GPUCTK_CONFIG).
#
# Without COMMAND it runs until SIGINT/SIGTERM. With COMMAND it runs COMMAND
# inside the namespaces once the kubelet is up, then tears down and exits
# with COMMAND's status. Either way everything it started dies with it.
#
# WORKDIR, seen from the host as well (kubelet/ and log/containers/ are
# bind-mounted over the kubelet's hard-coded paths inside):
#   manifests/       static pods: write a pod here to start it, remove it to stop it
#   cdi/             CDI specs containerd reads (cdi_spec_dirs); = /var/run/cdi inside
#   conf.d/          containerd drop-ins (gpuctk runtime configure --drop-in)
#   kubelet/         the kubelet's root dir, = /var/lib/kubelet inside
#   kubelet/device-plugins/  kubelet.sock; plugins put their sockets here
#   log/pods/, log/containers/  container logs (= /var/log/containers inside)
#   containerd.log, kubelet.log, containerd.sock
#   ready            written once the kubelet serves kubelet.sock
#   restart-kubelet  touch it (no COMMAND) to restart the kubelet; removed when done
#   ns.pid           `nsenter -t $(cat ns.pid) -m -n CMD` runs CMD beside the kubelet
#                    (e.g. busybox wget -qO- http://127.0.0.1:10255/pods)
# manifests/, cdi/ and conf.d/ are kept across runs; the rest is wiped at start.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sysctls="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"

# inside WORK BIN COMMAND...: PID 1 of the new namespaces.
inside() {
	local work=$1 bin=$2 kubelet=$3
	shift 3
	local pids=() rc=0 cmd=
	# SHIM_PATH goes first: containerd 1.7 cannot start the 2.x shim.
	export PATH="${SHIM_PATH:+$SHIM_PATH:}$bin:$PATH"
	stop() {
		trap - TERM INT
		# COMMAND, then the kubelet, so it restarts nothing, then containerd.
		# Returning from PID 1 kills the shims and containers left.
		[ -z "$cmd" ] || kill -TERM "$cmd" 2>/dev/null || true
		for p in "${pids[@]}"; do
			kill -TERM "$p" 2>/dev/null || true
			for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
			kill -KILL "$p" 2>/dev/null || true
		done
	}
	trap 'stop; exit 143' TERM INT

	ip link set lo up
	# Paths the kubelet and containerd hard-code: /var/lib/kubelet (pki/,
	# device-plugins/), /var/log/containers, and /run (shim sockets, runc
	# state, nri.sock).
	mount --bind "$work/kubelet" /var/lib/kubelet
	mount --bind "$work/log/containers" /var/log/containers
	mount -t tmpfs -o mode=755 tmpfs /run
	# Shared, as systemd makes / on a node: containerd refuses a volume
	# with HostToContainer propagation (the device plugin's /run/gpuctk/mps)
	# from a private mount. Its peers are in this namespace only.
	mount --make-shared /run
	# CDI's default dynamic spec dir, for tools that read the defaults
	# (gpuctk-runtime): the host's own /var/run/cdi is hidden by the tmpfs.
	mkdir /run/cdi
	mount --bind "$work/cdi" /run/cdi
	# The kubelet sets these global sysctls (kernel.panic=10, panic_on_oops=1,
	# vm.overcommit_memory=1, ...); protectKernelDefaults would only make it
	# fail. A file over each one here takes its writes instead of the host.
	for s in $sysctls; do
		cat "/proc/sys/$s" >"$work/sysctl/${s//\//.}"
		mount --bind "$work/sysctl/${s//\//.}" "/proc/sys/$s"
	done

	"${CONTAINERD:-containerd}" --config "$work/containerd.toml" >"$work/containerd.log" 2>&1 &
	pids=($! "${pids[@]}")
	local ctr=(ctr -a "$work/containerd.sock" -n k8s.io)
	for i in $(seq 300); do
		"${ctr[@]}" version >/dev/null 2>&1 && break
		kill -0 "${pids[0]}" 2>/dev/null || { echo "containerd exited; see $work/containerd.log" >&2; return 1; }
		[ "$i" -lt 300 ] || { echo "containerd did not start" >&2; return 1; }
		sleep 0.1
	done
	for img in "$work"/images/*.tar ${IMAGES:-}; do
		"${ctr[@]}" images import --local "$img" >/dev/null
	done

	start_kubelet() {
		"$kubelet" --config "$work/kubelet.yaml" --root-dir "$work/kubelet" --cert-dir "$work/kubelet/pki" \
			--v="${KUBELET_V:-2}" ${KUBELET_ARGS:-} >>"$work/kubelet.log" 2>&1 &
	}
	start_kubelet
	pids=($! "${pids[@]}")
	for i in $(seq 600); do
		if [ -S "$work/kubelet/device-plugins/kubelet.sock" ] &&
			busybox wget -qO- http://127.0.0.1:10248/healthz 2>/dev/null | grep -q ok; then
			break
		fi
		kill -0 "${pids[0]}" 2>/dev/null || { echo "kubelet exited; see $work/kubelet.log" >&2; stop; return 1; }
		[ "$i" -lt 600 ] || { echo "kubelet not healthy after 60s; see $work/kubelet.log" >&2; stop; return 1; }
		sleep 0.1
	done
	touch "$work/ready"
	echo "kubelet $("$kubelet" --version | cut -d' ' -f2) and containerd ready in $work"

	if [ $# -gt 0 ]; then
		# In the background, so that a signal is handled at once.
		WORK=$work "$@" &
		cmd=$!
		wait "$cmd" || rc=$?
		cmd=
		if ! kill -0 "${pids[0]}" 2>/dev/null; then
			echo "the kubelet died during the command; see $work/kubelet.log" >&2
			[ "$rc" -ne 0 ] || rc=1
		fi
	else
		# Wake on a signal or when either daemon dies.
		while kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null; do
			# A test restarts the kubelet by touching WORK/restart-kubelet:
			# the same process as a node's kubelet restart, state kept.
			if [ -e "$work/restart-kubelet" ]; then
				kill -TERM "${pids[0]}"
				wait "${pids[0]}" || true
				rm -f "$work/restart-kubelet"
				start_kubelet
				pids[0]=$!
				echo "kubelet restarted" >&2
			fi
			sleep 0.2 &
			wait $! || true
		done
		echo "a daemon exited; see $work/kubelet.log and $work/containerd.log" >&2
		rc=1
	fi
	stop
	return "$rc"
}

if [ "${1:-}" = --inside ]; then
	shift
	inside "$@"
	exit
fi

[ $# -ge 2 ] && [ -n "$1" ] && [ -n "$2" ] || { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run-standalone.sh needs root" >&2; exit 1; }
mkdir -p "$1"
work=$(cd "$1" && pwd)
bin=$(cd "$2" && pwd)
shift 2
kubelet=${KUBELET:-$bin/kubelet}
for b in "$bin/containerd" "$bin/ctr" "$bin/containerd-shim-runc-v2" "$kubelet"; do
	[ -x "$b" ] || { echo "missing $b (make the containerd tools, build-kubelet.sh)" >&2; exit 1; }
done
command -v busybox >/dev/null || { echo "busybox (busybox-static) is needed" >&2; exit 1; }

# One run per WORKDIR; fresh state, kept inputs; "ready" goes first so no
# one trusts a stale one.
exec 8>>"$work/.lock"
flock -x -n 8 || { echo "$work is in use by another run" >&2; exit 1; }
rm -f "$work/ready" "$work/ns.pid"
rm -rf "$work/containerd" "$work/kubelet" "$work/log" "$work/sysctl"
mkdir -p "$work"/{manifests,cdi,conf.d,kubelet/device-plugins,log/pods,log/containers,sysctl}
"$here/make-image.sh" "$work/images" >/dev/null

# One cgroup per run for everything the kubelet starts (cgroupRoot).
cgroup_root=/gpuctk-e2e-$$
esc() { printf '%s' "$1" | sed 's/[&|\\]/\\&/g'; }
sed "s|@WORK@|$(esc "$work")|g; s|@CGROUP_ROOT@|$cgroup_root|g" "$here/kubelet-config.yaml.in" >"$work/kubelet.yaml"
sed "s|@WORK@|$(esc "$work")|g" "${CONTAINERD_CONFIG:-$here/containerd-config.toml.in}" >"$work/containerd.toml"

# Host side: the two mount points and the cgroup. Runs may overlap (the
# namespaces keep them apart), and rmdir of a mount point in use in another
# namespace would detach it there: so each run holds a shared lock, and the
# last one out removes the mount points that runs made (listed in $made).
lock=/run/gpuctk-k8s-e2e.lock
made=/run/gpuctk-k8s-e2e.made
exec 9>>"$lock"
flock -s 9
cgroups=()
cleanup() {
	local c
	rm -f "$work/ready" "$work/ns.pid"
	for c in "${cgroups[@]}"; do
		# Bottom-up; a killed process may take a moment to leave its cgroup.
		for _ in $(seq 50); do
			find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
			[ -d "$c" ] || break
			sleep 0.1
		done
		[ ! -d "$c" ] || echo "could not remove cgroup $c" >&2
	done
	if [ -e "$made" ] && flock -x -n 9; then
		while read -r c; do rmdir "$c" 2>/dev/null || true; done <"$made"
		rm -f "$made"
	fi
}
trap cleanup EXIT
for d in /var/lib/kubelet /var/log/containers; do
	p=$d
	while [ ! -e "$p" ]; do echo "$p" >>"$made"; p=$(dirname "$p"); done # deepest first
	mkdir -p "$d"
done
# Empty cgroups of runs that were killed (their PID is gone).
for c in /sys/fs/cgroup/gpuctk-e2e-* /sys/fs/cgroup/*/gpuctk-e2e-*; do
	[ -d "$c" ] && ! kill -0 "${c##*-}" 2>/dev/null || continue
	find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
done
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
	mkdir "/sys/fs/cgroup$cgroup_root"
	cgroups+=("/sys/fs/cgroup$cgroup_root")
else
	for h in /sys/fs/cgroup/*/; do
		# Links such as cpu -> cpu,cpuacct name a hierarchy twice.
		[ ! -L "${h%/}" ] && mountpoint -q "$h" || continue
		mkdir "$h${cgroup_root#/}"
		cgroups+=("$h${cgroup_root#/}")
		if [ -f "$h/cpuset.cpus" ]; then
			cat "$h/cpuset.cpus" >"$h${cgroup_root#/}/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h${cgroup_root#/}/cpuset.mems"
		fi
	done
fi

# If this script is killed, even by SIGKILL, setpriv's death signal kills
# unshare (KILL: unshare blocks TERM), and --kill-child then sends TERM to the
# namespace's PID 1, which tears down. The cgroup and the mount points are
# left for the next run to remove.
setpriv --pdeathsig KILL unshare --mount --propagation private --net --pid --fork --mount-proc \
	--kill-child=SIGTERM "$0" --inside "$work" "$bin" "$kubelet" "$@" 8>&- 9>&- &
ns=$!
echo "$ns" >"$work/ns.pid"
# Signals go to PID 1 inside (the child of unshare), which tears down.
child() { cat "/proc/$ns/task/$ns/children" 2>/dev/null | cut -d' ' -f1; }
trap 'c=$(child); [ -n "$c" ] && kill -TERM "$c"' TERM INT
rc=0
while :; do
	wait "$ns" && rc=0 || rc=$?
	kill -0 "$ns" 2>/dev/null || break
done
exit "$rc"
