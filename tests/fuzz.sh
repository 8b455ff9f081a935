#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each
# (FUZZTIME, default 10s). A crash leaves its input under the package's
# testdata/fuzz/, where plain `go test` replays it from then on: commit it.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
status=0
while IFS= read -r file; do
	dir=$(dirname "$file")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
		echo "fuzz: ./$dir $target ($fuzztime)"
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$dir" >/tmp/gpuctk-fuzz.log 2>&1; then
			cat /tmp/gpuctk-fuzz.log
			status=1
		fi
	done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
exit $status
