#!/bin/sh
# gpuctk pre-remove, for the .deb (prerm remove|upgrade|...) and the .rpm
# (%preun 0 on erase, 1 on upgrade). On removal it stops the units while
# gpuctk (which gpuctk-mps stops its daemons with) is still there, and disables them. On
# upgrade it leaves them running: restarting MPS would cut its clients off.
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac

units="gpuctk-cdi-refresh.path gpuctk-cdi-refresh.service gpuctk-mps.service gpuctk-mig.service gpuctk-device-plugin.service"
# dpkg --remove keeps the conffile, and a later install's postinst is then
# told the old version, as on an upgrade: it enables again the units
# listed here, those enabled now (rpm -e keeps nothing: a later install is
# a first one).
state=/var/lib/gpuctk/enabled-units
if [ "$1" = remove ] && command -v systemctl >/dev/null 2>&1 && mkdir -p /var/lib/gpuctk 2>/dev/null; then
	for u in $units; do
		if systemctl --quiet is-enabled "$u" 2>/dev/null; then
			echo "$u"
		fi
	done >"$state" || true
fi
if [ -d /run/systemd/system ]; then
	# shellcheck disable=SC2086 # one word per unit
	systemctl stop $units || true
fi
if command -v systemctl >/dev/null 2>&1; then
	# shellcheck disable=SC2086
	systemctl disable $units >/dev/null 2>&1 || true
fi
exit 0
