# make bench: what gpuctk adds to a container's start, as one table
# (tests/bench): the hook on a small and a large root file system, the
# runtime around runc, spec generation and resolution, peak memory. Needs
# root. Writes bench.txt (ignored by git) and perf.md, the README's
# performance section. Not part of `make test`: nothing there is timed.
BENCH_RUNS ?= 25
BENCH_TIME ?= 0.3s

bench: build ldcache-deps
	tests/install-deps.sh
	@test -x /usr/bin/time || { echo "installing time"; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends time >/dev/null; }
	$(GO) run ./tests/bench -bin $(BIN) -runs $(BENCH_RUNS) -benchtime $(BENCH_TIME) -out bench.txt -perf perf.md
