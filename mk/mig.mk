# nvidia-ctk, NVIDIA's own CDI generator, built from the Go module proxy:
# the MIG tests run it against the fake NVML after `gpuctk mig apply`, to
# check that the MIG devices gpuctk makes are the ones NVIDIA's toolkit
# sees. Installed into $(TOOLS) only when missing; v1.17.8 is the version
# the tests were checked with (it links go-nvml v0.12.4-1).
NVIDIA_CTK_VERSION := v1.17.8

TEST_DEPS += $(TOOLS)/nvidia-ctk

$(TOOLS)/nvidia-ctk:
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) GOFLAGS=-mod=mod $(GO) install github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@$(NVIDIA_CTK_VERSION)
