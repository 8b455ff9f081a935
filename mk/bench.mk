# make bench: what gpuctk adds to a container's start, as one table
# (tests/bench): the hook on a small and a large root file system, the
# runtime around runc, spec generation and resolution, peak memory. Needs
# root. Writes bench.txt and perf.md (both ignored by git; perf.md is the
# README's performance section, pasted by hand). Not part of `make test`.
BENCH_RUNS ?= 25
BENCH_TIME ?= 0.3s

bench: build ldcache-deps
	tests/install-deps.sh
	@test -x /usr/bin/time || { echo "installing time"; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends time >/dev/null; }
	$(GO) run ./tests/bench -bin $(BIN) -runs $(BENCH_RUNS) -benchtime $(BENCH_TIME) -out bench.txt -perf perf.md
