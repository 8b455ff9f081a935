#!/bin/sh
# gpuctk post-install, for the .deb (postinst configure [OLD-VERSION]) and
# the .rpm (%post 1 on install, 2 on upgrade). Never fails the install: on
# a host without systemd (a container, a chroot) or without a GPU it does
# what it can and says what it skipped.
set -e

case "$1" in
configure) [ -z "$2" ] && first=yes || first=no ;;
1) first=yes ;;
2) first=no ;;
*) exit 0 ;;
esac

# Enable the refresh units on the first install only, so that an admin's
# `systemctl disable` survives upgrades. systemctl enable works offline
# (it only makes links), so images built in a chroot get them too.
enable=
[ "$first" = yes ] && enable="gpuctk-cdi-refresh.service gpuctk-cdi-refresh.path"
# An install after dpkg --remove (conffile kept, so told the old version
# as on an upgrade): the units enabled at the removal, which the prerm
# listed and disabled.
state=/var/lib/gpuctk/enabled-units
if [ "$first" = no ] && [ -f "$state" ]; then
	enable=$(cat "$state")
	first=again
	rm -f "$state"
fi
if [ -n "$enable" ] && command -v systemctl >/dev/null 2>&1; then
	# shellcheck disable=SC2086 # one word per unit
	systemctl enable $enable >/dev/null 2>&1 ||
		echo "gpuctk: warning: could not enable $enable" >&2
fi

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	# Start the watcher; on upgrade restart it if it runs, to watch what the
	# new version lists.
	if [ "$first" = no ]; then
		systemctl try-restart gpuctk-cdi-refresh.path || true
	elif systemctl --quiet is-enabled gpuctk-cdi-refresh.path; then
		systemctl start gpuctk-cdi-refresh.path || true
	fi
	# Refresh the spec now, with the new gpuctk on upgrade.
	if [ -e /proc/driver/nvidia/version ] && systemctl --quiet is-enabled gpuctk-cdi-refresh.service; then
		systemctl start --no-block gpuctk-cdi-refresh.service || true
	fi
elif [ -e /proc/driver/nvidia/version ]; then
	gpuctk cdi generate --if-driver --output /var/run/cdi/nvidia.yaml ||
		echo "gpuctk: warning: could not write /var/run/cdi/nvidia.yaml; run: gpuctk cdi generate --output /var/run/cdi/nvidia.yaml" >&2
fi
exit 0
