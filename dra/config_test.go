package dra

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDecodeConfig: each mistake gets one line saying what to write; a
// config with several mistakes gets them all.
func TestDecodeConfig(t *testing.T) {
	head := "apiVersion: gpu.gpuctk.io/v1alpha1\nkind: GpuConfig\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string // one line each; none for a valid config
	}{
		{"empty-sharing", head, nil},
		{"time-slicing", head + "sharing: {strategy: time-slicing}\n", nil},
		{"mps", head + "sharing: {strategy: mps, mps: {activeThreadPercentage: 50, pinnedMemoryLimit: 10GiB}}\n", nil},
		{"wrong-version", "apiVersion: gpu.gpuctk.io/v1\nkind: GpuConfig\n", []string{`GpuConfig: apiVersion is "gpu.gpuctk.io/v1": set "gpu.gpuctk.io/v1alpha1"`}},
		{"no-kind", "apiVersion: gpu.gpuctk.io/v1alpha1\n", []string{`GpuConfig: kind is "": set "GpuConfig"`}},
		{"unknown-field", head + "sharing: {strategy: mps, replicas: 2}\n", []string{`GpuConfig: unknown field "replicas": the fields are apiVersion, kind, sharing.strategy, sharing.mps.activeThreadPercentage and sharing.mps.pinnedMemoryLimit`}},
		{"bad-strategy", head + "sharing: {strategy: mig}\n", []string{`GpuConfig: sharing.strategy is "mig": use "time-slicing" or "mps"`}},
		{"mps-on-time-slicing", head + "sharing: {strategy: time-slicing, mps: {activeThreadPercentage: 50}}\n", []string{`GpuConfig: sharing.mps is set but sharing.strategy is "time-slicing": set strategy "mps" or remove mps`}},
		{"several", "apiVersion: v1\nkind: Gpu\nsharing: {strategy: mps, mps: {activeThreadPercentage: 101, pinnedMemoryLimit: '10'}}\n", []string{
			`GpuConfig: apiVersion is "v1": set "gpu.gpuctk.io/v1alpha1"`,
			`GpuConfig: kind is "Gpu": set "GpuConfig"`,
			`GpuConfig: sharing.mps.activeThreadPercentage is 101: it must be from 1 to 100`,
			`GpuConfig: sharing.mps.pinnedMemoryLimit is 10 bytes: it must be at least 1MiB`}},
		{"percentage-type", head + "sharing: {strategy: mps, mps: {activeThreadPercentage: half}}\n", []string{`GpuConfig: sharing.mps.activeThreadPercentage is string: it must be a whole number`}},
		{"bad-size", head + "sharing: {strategy: mps, mps: {pinnedMemoryLimit: lots}}\n", []string{`GpuConfig: sharing.mps.pinnedMemoryLimit: size "lots" is not valid: write a whole number with a unit such as 512MiB or 20GiB`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := yaml.YAMLToJSON([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			c, err := DecodeConfig(data)
			if tc.want == nil {
				if err != nil || c == nil {
					t.Fatalf("DecodeConfig: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("DecodeConfig accepted %s", tc.yaml)
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("error:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
		})
	}
	if _, err := DecodeConfig([]byte(`{"apiVersion":"gpu.gpuctk.io/v1alpha1","kind":"GpuConfig"} {}`)); err == nil || !strings.Contains(err.Error(), "data after the object") {
		t.Errorf("two objects: %v", err)
	}
}

// FuzzDecodeConfig: any parameters are a Config that passes the checks or
// an error, never a panic; an accepted one encodes and decodes the same.
func FuzzDecodeConfig(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"gpu.gpuctk.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"mps","mps":{"activeThreadPercentage":50,"pinnedMemoryLimit":"1GiB"}}}`))
	f.Add([]byte(`{"apiVersion":"gpu.gpuctk.io/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"time-slicing"}}`))
	f.Add([]byte(`{"kind":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeConfig(data)
		if err != nil {
			return
		}
		again, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		json, err := yaml.YAMLToJSON(again)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeConfig(json); err != nil {
			t.Fatalf("re-encoded %s refused: %v", json, err)
		}
	})
}
