package driver

import "testing"

func TestIsLibrary(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"libcuda.so", true},
		{"libcuda.so.1", true},
		{"libcuda.so.580.65.06", true},
		{"libnvidia-ml.so.1", true},
		{"libnvidia-pkcs11-openssl3.so.580.65.06", true},
		{"libnvidia-egl-wayland.so.1.1.19", true},
		{"libc.so.6", false},
		{"libpthread.so.0", false},
		{"libcudart.so.12", false},
		{"libcuda.something", false},
		{"libcuda", false},
		{"libnvme.so.1", false},
		{"", false},
	} {
		if got := IsLibrary(tt.name); got != tt.want {
			t.Errorf("IsLibrary(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
