#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each
# (FUZZTIME, default 10s). A crash leaves its input under the package's
# testdata/fuzz/, where plain `go test` replays it from then on: commit it.
#
# Go 1.26's fuzz coordinator can fail a run at the -fuzztime deadline with
# "context deadline exceeded" and no failing input (golang/go#75804, fixed
# in Go 1.27), the more often the more loaded the machine. A run that fails
# without writing a failing input is retried, twice; one that writes a
# failing input fails at once.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while IFS= read -r file; do
	dir=$(dirname "$file")
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
		echo "fuzz: ./$dir $target ($fuzztime)"
		for try in 1 2 3; do
			if go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "./$dir" >"$log" 2>&1; then
				break
			fi
			if grep -q 'Failing input written to' "$log" || ! grep -q 'context deadline exceeded' "$log" || [ $try = 3 ]; then
				cat "$log"
				status=1
				break
			fi
			echo "fuzz: $target stopped at its deadline without a failing input (golang/go#75804); running it again"
		done
	done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
exit $status
