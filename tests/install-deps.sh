#!/usr/bin/env bash
# Installs what the end-to-end tests need, when it is missing: podman and
# runc for real containers, busybox for their root file systems. Runs as
# root on a Debian machine (CI and the developers' machines).
set -euo pipefail
need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
[ -x /bin/busybox ] || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
