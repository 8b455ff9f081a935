// Package render renders the Helm chart (deployments/helm/gpuctk) with
// Helm's own Go library and the kustomize manifests
// (deployments/kubernetes) with kustomize's, as `helm template` and
// `kubectl apply -k` would, and keeps the results as golden files in
// deployments/kubernetes/testdata/rendered, where the main module's strict
// decode test reads them. It is a module of its own so that Helm and
// kustomize, test-only and heavy, stay out of gpuctk's go.mod; `make test`
// runs it (mk/render.mk).
package render
