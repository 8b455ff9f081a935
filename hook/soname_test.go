package hook

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/tests/fakehost"
)

// sonameOf runs soname on the file at path.
func sonameOf(t testing.TB, path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return soname(fd, st.Size)
}

// TestSONAME reads gcc-built libraries as debug/elf does, and refuses
// what the linker cache must not list: other machines' objects,
// executables, files cut short or pointing past their end.
func TestSONAME(t *testing.T) {
	for _, want := range []string{"libcuda.so.1", "libnvidia-ptxjitcompiler.so.1", "libx.so"} {
		obj, err := fakehost.SharedObject(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sonameOf(t, obj)
		if err != nil || got != want {
			t.Errorf("soname of a library built with SONAME %s = %q, %v", want, got, err)
		}
		ef, err := elf.Open(obj)
		if err != nil {
			t.Fatal(err)
		}
		names, _ := ef.DynString(elf.DT_SONAME)
		ef.Close()
		if len(names) != 1 || names[0] != got {
			t.Errorf("debug/elf reads %v, soname %q", names, got)
		}
	}

	obj, err := fakehost.SharedObject("libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	lib, _ := os.ReadFile(obj)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), lib...)) }
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"text", []byte("INPUT(-lc)\n")},
		{"header only", lib[:64]},
		{"cut in the section headers", lib[:len(lib)-10]},
		{"32-bit", mutate(func(b []byte) []byte { b[4] = 1; return b })},
		{"big-endian", mutate(func(b []byte) []byte { b[5] = 2; return b })},
		{"an executable", mutate(func(b []byte) []byte { b[16] = 2; return b })},
		{"another machine", mutate(func(b []byte) []byte { b[18] = 40; return b })},
		{"section headers past the end", mutate(func(b []byte) []byte { b[47] = 0x7f; return b })},
		{"too many sections", mutate(func(b []byte) []byte { b[60], b[61] = 0xff, 0xff; return b })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			os.WriteFile(p, tc.data, 0o644)
			if got, err := sonameOf(t, p); !errors.Is(err, errNotLibrary) {
				t.Errorf("soname = %q, %v; want errNotLibrary", got, err)
			}
		})
	}
}

// FuzzSONAME feeds arbitrary bytes as a library: soname fails or answers,
// never panics, and never names something debug/elf would not.
func FuzzSONAME(f *testing.F) {
	if obj, err := fakehost.SharedObject("libcuda.so.1"); err == nil {
		data, _ := os.ReadFile(obj)
		f.Add(data)
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "lib.so")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := sonameOf(t, p)
		if err != nil || got == "" {
			return
		}
		ef, err := elf.Open(p)
		if err != nil {
			return // debug/elf is stricter about other headers
		}
		defer ef.Close()
		if names, err := ef.DynString(elf.DT_SONAME); err == nil && len(names) > 0 && names[0] != got {
			t.Errorf("soname %q, debug/elf %q", got, names[0])
		}
	})
}
