# The upstream kubelet, built from the Go module proxy (tests/k8s/harness/build-kubelet.sh),
# for the device plugin's end-to-end test against a real kubelet and containerd.
KUBE_VERSION := v1.34.4

TEST_DEPS += $(TOOLS)/kubelet

$(TOOLS)/kubelet: tests/k8s/harness/build-kubelet.sh tests/k8s/harness/kubelet-mod/go.mod.in tests/k8s/harness/kubelet-mod/main.go.in
	KUBE_VERSION=$(KUBE_VERSION) tests/k8s/harness/build-kubelet.sh $(TOOLS)

# containerd 1.7 cannot start the 2.x shim ("started through the deprecated
# API"): the 1.7 end-to-end test puts this folder first on PATH.
TEST_DEPS += $(TOOLS)/containerd-1.7-shim/containerd-shim-runc-v2

$(TOOLS)/containerd-1.7-shim/containerd-shim-runc-v2:
	@mkdir -p $(dir $@)
	dir=$$($(GO) mod download -json github.com/containerd/containerd@$(CONTAINERD17_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
		cd "$$dir" && GOFLAGS=-mod=mod CGO_ENABLED=0 $(GO) build -o $@ ./cmd/containerd-shim-runc-v2
