# make image: dist/gpuctk-image.tar, an OCI image archive (OCI layout in a
# tar) of the binaries, for `podman load -i` and `ctr images import`. No
# registry and no docker daemon: tools/ociimage writes it, with the cgo
# binaries' loader and libraries from ldd. Reproducible: the same binaries
# give the same bytes (SOURCE_DATE_EPOCH dates the entries; 0 when unset).
#
# The repository is the Helm chart's image.repository, the one place that
# names it (the kustomize manifests name it too, with the chart's
# appVersion: deployments/kubernetes's TestImage checks they agree).
# REGISTRY=HOST[/PATH] names it HOST[/PATH]/gpuctk instead and pushes it
# there once written (skopeo, else podman); IMAGE_TAG sets the tag (the
# version by default; the chart's appVersion for a release).

IMAGE_VERSION    ?= $(shell echo '$(VERSION)' | tr -c 'A-Za-z0-9_.\n-' '_')
IMAGE_TAG        ?= $(IMAGE_VERSION)
CHART_REPOSITORY := $(shell sed -n 's/^  repository: *//p' deployments/helm/gpuctk/values.yaml)
IMAGE_REPOSITORY ?= $(if $(REGISTRY),$(REGISTRY)/gpuctk,$(CHART_REPOSITORY))
IMAGE_NAME       ?= $(IMAGE_REPOSITORY):$(IMAGE_TAG)
IMAGE_ARCHIVE    ?= dist/gpuctk-image.tar
IMAGE_BINS       ?= gpuctk gpuctk-hook gpuctk-runtime gpuctk-device-plugin gpuctk-dra

.PHONY: image print-image
image: $(addprefix $(BIN)/,$(IMAGE_BINS))
	$(GO) run ./tools/ociimage -o $(IMAGE_ARCHIVE) -name $(IMAGE_NAME) -arch $$($(GO) env GOARCH) $^
	@echo "wrote $(IMAGE_ARCHIVE) ($(IMAGE_NAME)): podman load -i $(IMAGE_ARCHIVE), or ctr -n k8s.io images import $(IMAGE_ARCHIVE)"
ifneq ($(REGISTRY),)
	@if command -v skopeo >/dev/null; then \
		skopeo copy oci-archive:$(IMAGE_ARCHIVE) docker://$(IMAGE_NAME); \
	elif command -v podman >/dev/null; then \
		podman load -q -i $(IMAGE_ARCHIVE) && podman push $(IMAGE_NAME); \
	else \
		echo "REGISTRY=$(REGISTRY): pushing needs skopeo or podman on PATH; $(IMAGE_ARCHIVE) is written"; exit 1; \
	fi
	@echo "pushed $(IMAGE_NAME): helm install ... --set image.repository=$(IMAGE_REPOSITORY),image.tag=$(IMAGE_TAG), or kustomize edit set image $(CHART_REPOSITORY)=$(IMAGE_NAME)"
endif

# The image's name, for scripts and TestImage.
print-image:
	@echo $(IMAGE_NAME)
