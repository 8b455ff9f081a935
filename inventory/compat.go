package inventory

import "strings"

// ForwardCompatible reports whether NVIDIA supports CUDA forward
// compatibility (the cuda-compat package: a newer libcuda over an older
// kernel driver) on this GPU: data-center GPUs, and the RTX cards sold as
// server SKUs, but not GeForce, TITAN, Quadro or workstation RTX cards
// (NVIDIA's CUDA Compatibility guide). NVML names data-center GPUs "Tesla
// V100-SXM2-16GB" or, since Ampere, "NVIDIA A100-SXM4-40GB", "NVIDIA H100
// 80GB HBM3", "NVIDIA L40S": the consumer and workstation lines are the
// ones named by brand, so the name tells them apart.
func (g *GPU) ForwardCompatible() bool {
	name := strings.ToLower(g.Name)
	if strings.Contains(name, "server edition") {
		return true // e.g. NVIDIA RTX PRO 6000 Blackwell Server Edition
	}
	for _, brand := range []string{"geforce", "titan", "quadro", "rtx", "nvs"} {
		if strings.Contains(name, brand) {
			return false
		}
	}
	return name != ""
}

// ForwardCompatible reports whether every GPU of the host supports CUDA
// forward compatibility: the spec's one hook call serves all of them, and
// a container may get any.
func (h *Host) ForwardCompatible() bool {
	for i := range h.GPUs {
		if !h.GPUs[i].ForwardCompatible() {
			return false
		}
	}
	return len(h.GPUs) > 0
}
