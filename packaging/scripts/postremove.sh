#!/bin/sh
# gpuctk post-remove, for the .deb (postrm remove|purge|upgrade|...) and the
# .rpm (%postun 0 on erase, 1 on upgrade).
set -e

case "$1" in
remove | purge | 0) ;;
*) exit 0 ;;
esac

# The generated spec names /usr/bin/gpuctk-hook, which is gone: a container
# asking for a GPU would fail on the missing hook. Remove the spec only if
# gpuctk wrote it (its first line is gpuctk's mark), never another tool's
# or an admin's, whatever it names.
spec=/var/run/cdi/nvidia.yaml
if [ -f "$spec" ] && [ ! -L "$spec" ] && [ "$(head -n 1 "$spec")" = "# Written by gpuctk." ]; then
	rm -f "$spec"
fi

if [ "$1" = purge ]; then
	rm -f /var/log/gpuctk-runtime.log
	# The driver folders (hard links to the driver's files, see [cdi]
	# driver-folder): on purge only, as a running container may have one
	# mounted, and removing its links would take the files from it.
	rm -rf /var/lib/gpuctk/driver
	rm -f /var/lib/gpuctk/enabled-units
	rmdir /var/lib/gpuctk 2>/dev/null || true
	# dpkg removes the conffile; the folder may hold an admin's backups.
	rmdir /etc/gpuctk 2>/dev/null || true
fi

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
