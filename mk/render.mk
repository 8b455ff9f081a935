# tests/render: the Helm chart and the kustomize manifests rendered with
# Helm's and kustomize's own Go libraries, compared with the golden files
# that deployments/kubernetes's strict decode test reads. A module of its
# own (its go.mod pins Helm and kustomize), so they stay out of gpuctk's;
# the Go module proxy is all it needs.
.PHONY: test-render
test-render:
	cd tests/render && $(GO) mod tidy -diff >/dev/null || { echo "tests/render: go.mod/go.sum are not tidy: run go mod tidy there"; exit 1; }
	cd tests/render && $(GO) vet ./... && $(GO) test -count=1 ./...

test: test-render
