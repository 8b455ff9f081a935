package inventory

import "testing"

func TestForwardCompatible(t *testing.T) {
	for name, want := range map[string]bool{
		"NVIDIA A100-SXM4-40GB": true,
		"NVIDIA H100 80GB HBM3": true,
		"NVIDIA L40S":           true,
		"Tesla P100-PCIE-16GB":  true,
		"Tesla T4":              true,
		"NVIDIA RTX PRO 6000 Blackwell Server Edition": true,
		"NVIDIA GeForce RTX 4090":                      false,
		"NVIDIA RTX A6000":                             false,
		"Quadro RTX 8000":                              false,
		"NVIDIA TITAN RTX":                             false,
		"":                                             false,
	} {
		g := GPU{Name: name}
		if got := g.ForwardCompatible(); got != want {
			t.Errorf("%q: ForwardCompatible() = %v, want %v", name, got, want)
		}
	}
	h := &Host{GPUs: []GPU{{Name: "NVIDIA A100-SXM4-40GB"}, {Name: "NVIDIA GeForce RTX 4090"}}}
	if h.ForwardCompatible() {
		t.Error("a host with a GeForce card supports forward compatibility for all its GPUs")
	}
	if !(&Host{GPUs: h.GPUs[:1]}).ForwardCompatible() {
		t.Error("a host of A100s does not support forward compatibility")
	}
}
