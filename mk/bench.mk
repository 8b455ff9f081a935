# make bench: what gpuctk adds to a container's start, as one table
# (tests/bench): the hook on a small and a large root file system, the
# runtime around runc, spec generation and resolution, peak memory, and
# the device plugin (Allocate, ListAndWatch, and a pod's start in a real
# standalone kubelet and containerd: tests/k8s/harness). Needs
# root. Writes bench.txt and perf.md (both ignored by git; perf.md is the
# README's performance section, pasted by hand). Not part of `make test`.
BENCH_RUNS ?= 25
BENCH_TIME ?= 0.3s
# Sections, in order: hook, runtime, driverfs (the driver on its own
# read-only file system against the same), generate, plugin (e.g.
# BENCH_ONLY=plugin).
BENCH_ONLY ?= hook,runtime,driverfs,generate,plugin
# Pairs of pods (plain, one GPU) for the pod start row.
BENCH_PODS ?= 30
# The pod pairs again on a journaled ext4 made in a file (false: left out).
BENCH_JOURNAL ?= true

# The kubelet and containerd come from mk/k8s.mk and mk/runtime.mk (read
# after this file, so named here rather than through their variables).
bench: build ldcache-deps $(TOOLS)/kubelet $(TOOLS)/containerd $(TOOLS)/ctr $(TOOLS)/containerd-shim-runc-v2
	tests/install-deps.sh
	@test -x /usr/bin/time || { echo "installing time"; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq --no-install-recommends time >/dev/null; }
	$(GO) run ./tests/bench -bin $(BIN) -runs $(BENCH_RUNS) -benchtime $(BENCH_TIME) -only $(BENCH_ONLY) -pods $(BENCH_PODS) -journal=$(BENCH_JOURNAL) -out bench.txt -perf perf.md
