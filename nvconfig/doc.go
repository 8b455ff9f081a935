// Package nvconfig converts configs of NVIDIA's k8s-device-plugin
// (version v1, YAML or JSON, alone or as the values of a Kubernetes
// ConfigMap) into gpuctk config.toml files, so that a cluster moving to
// gpuctk keeps its MIG strategy, device list strategy and sharing.
//
// The conversion is strict: a field it does not know, or a setting gpuctk
// cannot express (a count of devices, a resource name the MIG strategy
// does not advertise, time-slicing and MPS at once), is an error naming
// the field's path, such as sharing.timeSlicing.resources[1].devices.
// Settings that have no gpuctk counterpart but change nothing a container
// sees are carried as comments in the output, never dropped silently.
package nvconfig
