// Package kubernetes holds gpuctk's Kubernetes manifests (kustomize-ready:
// kubectl apply -k deployments/kubernetes) and the test that decodes each
// of them strictly with the Kubernetes API types. It has no Go code of its
// own.
package kubernetes
