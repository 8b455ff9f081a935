package ldcache

import (
	"os"
	"testing"
)

// driverEntries is what a hook adds for a typical NVIDIA driver.
var driverEntries = func() []Entry {
	var out []Entry
	for _, s := range []string{
		"libcuda.so.1", "libcudadebugger.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1",
		"libnvidia-nvvm.so.4", "libnvidia-gpucomp.so.580.65.06", "libnvidia-cfg.so.1", "libnvidia-opencl.so.1",
		"libnvidia-allocator.so.1", "libnvidia-encode.so.1", "libnvcuvid.so.1", "libnvidia-opticalflow.so.1",
		"libGLX_nvidia.so.0", "libEGL_nvidia.so.0", "libGLESv2_nvidia.so.2", "libGLESv1_CM_nvidia.so.1",
		"libnvidia-glcore.so.580.65.06", "libnvidia-tls.so.580.65.06", "libnvidia-glsi.so.580.65.06",
		"libnvidia-fbc.so.1", "libnvidia-rtcore.so.580.65.06", "libnvoptix.so.1",
	} {
		out = append(out, Entry{Flags: FlagELFLibc6 | FlagX8664Lib64, Key: s, Value: "/usr/lib/x86_64-linux-gnu/" + s})
	}
	return out
}()

// BenchmarkMerge times what the hook does per container: parse the
// image's cache (this machine's, about 540 entries), add a driver's
// libraries, marshal the result; or Merge, the same in one pass.
func BenchmarkMerge(b *testing.B) {
	data, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		b.Fatal(err)
	}
	parsed, err := Parse(data)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d entries, %d bytes; adding %d", len(parsed.Entries), len(data), len(driverEntries))
	b.Run("Parse", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := Parse(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Add", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := *parsed
			c.Add(driverEntries...)
		}
	})
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parsed.Marshal(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What the hook does, laying the strings out as ldconfig does or
	// keeping the image's string table.
	for name, marshal := range map[string]func(*Cache) ([]byte, error){
		"ParseAddMarshal":               (*Cache).Marshal,
		"ParseAddMarshalKeepingStrings": (*Cache).MarshalKeepingStrings,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				c, err := Parse(data)
				if err != nil {
					b.Fatal(err)
				}
				c.Add(driverEntries...)
				if _, err := marshal(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// What the hook does now: the same bytes in one pass.
	b.Run("Merge", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := Merge(data, driverEntries...); err != nil {
				b.Fatal(err)
			}
		}
	})
}
