# make image: dist/gpuctk-image.tar, an OCI image archive (OCI layout in a
# tar) of the binaries, for `podman load -i` and `ctr images import`. No
# registry and no docker daemon: tools/ociimage writes it, with the cgo
# binaries' loader and libraries from ldd. Reproducible: the same binaries
# give the same bytes (SOURCE_DATE_EPOCH dates the entries; 0 when unset).

IMAGE_VERSION ?= $(shell echo '$(VERSION)' | tr -c 'A-Za-z0-9_.\n-' '_')
IMAGE_NAME    ?= docker.io/gpuctk/gpuctk:$(IMAGE_VERSION)
IMAGE_ARCHIVE ?= dist/gpuctk-image.tar
IMAGE_BINS    ?= gpuctk gpuctk-hook gpuctk-runtime gpuctk-device-plugin gpuctk-dra

.PHONY: image
image: $(addprefix $(BIN)/,$(IMAGE_BINS))
	$(GO) run ./tools/ociimage -o $(IMAGE_ARCHIVE) -name $(IMAGE_NAME) -arch $$($(GO) env GOARCH) $^
	@echo "wrote $(IMAGE_ARCHIVE) ($(IMAGE_NAME)): podman load -i $(IMAGE_ARCHIVE), or ctr -n k8s.io images import $(IMAGE_ARCHIVE)"
