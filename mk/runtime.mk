# containerd 2.x, its runc shim and ctr, built from the Go module proxy for
# the runtime's end-to-end tests. Installed into $(TOOLS) only when missing.

CONTAINERD_VERSION := v2.4.2
CONTAINERD_TOOLS   := $(TOOLS)/containerd $(TOOLS)/ctr $(TOOLS)/containerd-shim-runc-v2

TEST_DEPS += $(CONTAINERD_TOOLS)

$(CONTAINERD_TOOLS):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/containerd/containerd/v2/cmd/$(notdir $@)@$(CONTAINERD_VERSION)

# containerd 1.7, only to check that it loads the drop-in too. Its module
# cannot be go-installed (exclude directives), so build it in place.
CONTAINERD17_VERSION := v1.7.35
TEST_DEPS += $(TOOLS)/containerd-1.7

$(TOOLS)/containerd-1.7:
	@mkdir -p $(TOOLS)
	dir=$$($(GO) mod download -json github.com/containerd/containerd@$(CONTAINERD17_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
		cd "$$dir" && GOFLAGS=-mod=mod $(GO) build -o $@ ./cmd/containerd

# A CRI client for the runtime class test: crictl is not on the Go module
# proxy, so tests/criclient (a module of its own, to keep gRPC out of
# gpuctk's go.mod) stands in for it.
TEST_DEPS += $(TOOLS)/criclient

$(TOOLS)/criclient: tests/criclient/main.go tests/criclient/go.mod tests/criclient/go.sum
	@mkdir -p $(TOOLS)
	cd tests/criclient && $(GO) build -o $@ .
