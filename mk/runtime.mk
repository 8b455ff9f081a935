# containerd 2.x, its runc shim and ctr, built from the Go module proxy for
# the runtime's end-to-end tests. Installed into $(TOOLS) only when missing.

CONTAINERD_VERSION := v2.4.2
CONTAINERD_TOOLS   := $(TOOLS)/containerd $(TOOLS)/ctr $(TOOLS)/containerd-shim-runc-v2

TEST_DEPS += $(CONTAINERD_TOOLS)

$(CONTAINERD_TOOLS):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/containerd/containerd/v2/cmd/$(notdir $@)@$(CONTAINERD_VERSION)
