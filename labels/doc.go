// Package labels computes the node labels of a host with the names NVIDIA's
// GPU feature discovery uses (nvidia.com/gpu.count, gpu.product, ...), so
// nodeSelectors written for NVIDIA's stack keep working, and writes them
// as a Node Feature Discovery local feature file.
//
// The labels come from the same offer.Set the spec and the device plugin
// read: sharing and MIG strategy are as the plugin advertises them.
package labels
