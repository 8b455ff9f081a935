# gpuctk build and test entry points. `make test` is what CI runs: it
# installs what the end-to-end tests need (Debian packages, Go tools) when
# missing, then runs every test. Fragments in mk/ add their own set-up to
# TEST_DEPS and their own targets.

GO       ?= go
# The same version string as the packages' (mk/packaging.mk): 1.2.3, or
# 1.2.3+4.g<sha> four commits after v1.2.3, 0.0.0 without a tag.
VERSION  ?= $(PKG_VERSION)
PKG      := github.com/gpuctk/gpuctk
LDFLAGS   = -s -w -X $(PKG)/internal/version.Version=$(VERSION)
BIN      := bin
comma    := ,
# go-nvml's header marks many calls deprecated; we call none of those.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations

# Tools built from the Go module proxy land here, cached between runs.
TOOLS    := $(CURDIR)/.cache/tools
export PATH := $(TOOLS):$(PATH)

TEST_DEPS :=
FUZZTIME  ?= 10s

.DEFAULT_GOAL := all

# Fragments add to TEST_DEPS, so they are read before the rules use it.
include $(wildcard mk/*.mk)

.PHONY: all build man spec test fuzz bench deps lint clean
all: build

build: $(BIN)/gpuctk $(BIN)/gpuctk-device-plugin $(BIN)/gpuctk-dra $(BIN)/gpuctk-hook $(BIN)/gpuctk-runtime man

# The man pages and bash completion: gpuctk's and the device plugin's are
# written by the binaries themselves; the hook's and the runtime's, which
# people do not run, are packaging/man/*.8.
man: $(BIN)/gpuctk $(BIN)/gpuctk-device-plugin $(BIN)/gpuctk-dra
	$(BIN)/gpuctk man > $(BIN)/gpuctk.8
	$(BIN)/gpuctk-device-plugin man > $(BIN)/gpuctk-device-plugin.8
	$(BIN)/gpuctk-dra man > $(BIN)/gpuctk-dra.8
	$(BIN)/gpuctk completion bash > $(BIN)/gpuctk.bash

# gpuctk, the device plugin and the DRA driver load NVML with dlopen
# (cgo). The hook and the runtime are static and free of cgo: they run on
# every container start and must not load NVML.
$(BIN)/gpuctk $(BIN)/gpuctk-device-plugin $(BIN)/gpuctk-dra: FORCE
	$(GO) build -trimpath -buildmode=pie -ldflags '$(LDFLAGS)' -o $@ ./cmd/$(notdir $@)
#
# Both also start with profstackdepth=0 added to the GODEBUG defaults the go
# command picked for them (none while go.mod's go line is the toolchain's).
# The linker turns memory profiling off in a program that cannot read the
# profile, but the runtime has already drawn when the first sample falls
# (about every 512 KiB allocated): a hook run, which allocates 140 to 430
# KiB, still recorded one sample in a quarter to a half of its runs,
# walking the stack and mapping the profile's tables (2.4% of the hook's
# CPU samples in `perf record` over 300 runs; none with it). With no stack
# to record into, the sample returns at once.
NOPROF_GODEBUG = $(shell $(GO) list -f '{{.DefaultGODEBUG}}' ./cmd/$(notdir $@) 2>/dev/null)
$(BIN)/gpuctk-hook $(BIN)/gpuctk-runtime: FORCE
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS) -X runtime.godebugDefault=$(if $(NOPROF_GODEBUG),$(NOPROF_GODEBUG)$(comma))profstackdepth=0' -o $@ ./cmd/$(notdir $@)

# The main job on a machine without a GPU: the spec of a simulated host on
# stdout, its summary on stderr (make spec SIMULATE=h100 for another).
SIMULATE ?= dgx-a100
spec:
	@$(GO) run ./cmd/gpuctk cdi generate --simulate $(SIMULATE)

deps: $(TEST_DEPS)
	tests/install-deps.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }
	@n=$$($(GO) list -deps ./cmd/gpuctk-hook ./cmd/gpuctk-runtime | grep -Ec 'go-nvml|gpuctk/inventory|k8s.io/client-go|k8s.io/dynamic-resource-allocation'); test $$n -eq 0 || { echo "hook or runtime links go-nvml, the embedded profiles (package inventory) or the DRA driver's Kubernetes client"; exit 1; }

test: deps lint
	$(GO) test -race -count=1 -timeout 40m ./...
	FUZZTIME=$(FUZZTIME) tests/fuzz.sh

# Every fuzz target for FUZZTIME each.
fuzz:
	FUZZTIME=$(FUZZTIME) tests/fuzz.sh

clean:
	rm -rf $(BIN) dist

FORCE:

