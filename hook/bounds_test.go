package hook

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	hookBinOnce sync.Once
	hookBinPath string
	hookBinErr  error
)

// hookBin builds cmd/gpuctk-hook once, to measure it as a process.
func hookBin(t *testing.T) string {
	t.Helper()
	hookBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpuctk-hook-bin")
		if err != nil {
			hookBinErr = err
			return
		}
		hookBinPath = filepath.Join(dir, "gpuctk-hook")
		if out, err := exec.Command("go", "build", "-o", hookBinPath, "../cmd/gpuctk-hook").CombinedOutput(); err != nil {
			hookBinErr = err
			t.Logf("%s", out)
		}
	})
	if hookBinErr != nil {
		t.Fatalf("build gpuctk-hook: %v", hookBinErr)
	}
	return hookBinPath
}

// overlappingCache is a 1 MiB cache whose 20,000 entries use eight
// glibc-hwcaps names that are one 512 KiB run of a byte, each starting a
// byte after the other: work per entry times name length is quadratic.
func overlappingCache() []byte {
	const n, length, names = 20000, 512 << 10, 8
	le := binary.LittleEndian
	strStart := 48 + n*24
	tab := "k\x00" + strings.Repeat("a", length) + "\x00"
	extOff := (strStart + len(tab) + 3) &^ 3
	hwOff := extOff + 8 + 16
	data := make([]byte, hwOff+4*names)
	copy(data, "glibc-ld.so.cache1.1")
	le.PutUint32(data[20:], n)
	le.PutUint32(data[24:], uint32(len(tab)))
	data[28] = 2 // little-endian
	le.PutUint32(data[32:], uint32(extOff))
	for i := range n {
		p := data[48+i*24:]
		le.PutUint32(p, 0x0303)
		le.PutUint32(p[4:], uint32(strStart))
		le.PutUint32(p[8:], uint32(strStart))
		le.PutUint64(p[16:], 1<<62|uint64(i%names))
	}
	copy(data[strStart:], tab)
	le.PutUint32(data[extOff:], 0xeaa42174)
	le.PutUint32(data[extOff+4:], 1)
	le.PutUint32(data[extOff+8:], 1) // glibc-hwcaps section
	le.PutUint32(data[extOff+16:], uint32(hwOff))
	le.PutUint32(data[extOff+20:], 4*names)
	for i := range names {
		le.PutUint32(data[hwOff+4*i:], uint32(strStart+2+i))
	}
	return data
}

func mkfifo(t *testing.T, p string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.Remove(p)
	if err := unix.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSetupHostileFiles plants files that block, never end, are huge or
// cost quadratic work where the hook (or the ldconfig it runs) reads the
// image: each run of the built hook ends within 1 s and 64 MiB (ldconfig
// included), works or fails in one line, and changes nothing outside the
// root. A link to a FIFO among the libraries blocks ldconfig's own open:
// that one ends at the ldconfig timeout, and says so.
func TestSetupHostileFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mknod of a character device, and the hook's chroot'ed ldconfig")
	}
	bin := hookBin(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "host"), []byte("host file"), 0o644)
	before := snapshot(t, outside)
	for _, tc := range []struct {
		name    string
		cache   bool // an image cache to merge into
		plant   func(t *testing.T, root string)
		want    string // in stderr
		fails   bool
		timeout bool
		// crafted: the cache is too costly to list with ldconfig -p (its
		// names are 512 KiB each): check its size instead.
		crafted bool
	}{
		{name: "ld.so.cache FIFO", cache: true, plant: func(t *testing.T, r string) {
			mkfifo(t, filepath.Join(r, "etc/ld.so.cache"))
		}, want: "/etc/ld.so.cache is a FIFO, not a regular file; rebuilt it with ldconfig"},
		{name: "ld.so.cache endless character device", cache: true, plant: func(t *testing.T, r string) {
			p := filepath.Join(r, "etc/ld.so.cache")
			os.Remove(p)
			if err := unix.Mknod(p, syscall.S_IFCHR|0o644, int(unix.Mkdev(1, 5))); err != nil {
				t.Fatal(err)
			}
		}, want: "/etc/ld.so.cache is a character device, not a regular file; rebuilt it with ldconfig"},
		{name: "ld.so.cache 2 GiB sparse", cache: true, plant: func(t *testing.T, r string) {
			if err := os.Truncate(filepath.Join(r, "etc/ld.so.cache"), 2<<30); err != nil {
				t.Fatal(err)
			}
		}, want: "/etc/ld.so.cache is 2147483648 bytes, over the size limit of 8388608 bytes; rebuilt it with ldconfig"},
		{name: "ld.so.cache overlapping hwcaps names", cache: true, plant: func(t *testing.T, r string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.cache"), overlappingCache(), 0o644)
		}, crafted: true},
		{name: "ld.so.conf FIFO", plant: func(t *testing.T, r string) {
			mkfifo(t, filepath.Join(r, "etc/ld.so.conf"))
		}, want: "/etc/ld.so.conf is a FIFO, not a regular file; ldconfig reads the folders of the other files only"},
		{name: "ld.so.conf include FIFO", plant: func(t *testing.T, r string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("include /etc/ld.so.conf.d/*.conf\n"), 0o644)
			os.MkdirAll(filepath.Join(r, "etc/ld.so.conf.d"), 0o755)
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf.d/a.conf"), []byte("/opt/a\n"), 0o644)
			mkfifo(t, filepath.Join(r, "etc/ld.so.conf.d/b.conf"))
		}, want: "/etc/ld.so.conf.d/b.conf is a FIFO"},
		{name: "ld.so.conf includes itself", plant: func(t *testing.T, r string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("include /etc/ld.so.conf\n"), 0o644)
		}, want: "nests includes deeper than 8"},
		{name: "ld.so.conf.d FIFO", plant: func(t *testing.T, r string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("include ld.so.conf.d/*.conf\n"), 0o644)
			mkfifo(t, filepath.Join(r, "etc/ld.so.conf.d"))
		}, want: "not a directory"},
		{name: "ld.so.conf include endless device", plant: func(t *testing.T, r string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("include /etc/zero\n"), 0o644)
			if err := unix.Mknod(filepath.Join(r, "etc/zero"), syscall.S_IFCHR|0o644, int(unix.Mkdev(1, 5))); err != nil {
				t.Fatal(err)
			}
		}, want: "/etc/zero is a character device"},
		// ldconfig is given the folders of the files that are fit: lines
		// that read as its options ("-r" moves its root, "-C" its cache)
		// stay folders, after "--".
		{name: "ld.so.conf lines as ldconfig options", plant: func(t *testing.T, r string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("-r"+outside+"\n-C/host\ninclude /etc/fifo\n"), 0o644)
			mkfifo(t, filepath.Join(r, "etc/fifo"))
		}, want: "/etc/fifo is a FIFO"},
		// Include patterns that match nothing read no file, yet each lists
		// its folder: bounded in number, and in names matched in all.
		{name: "ld.so.conf include patterns past the bound", plant: func(t *testing.T, r string) {
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("include"+strings.Repeat(" /etc/x*", 300)+"\n"), 0o644)
		}, want: "/etc/ld.so.conf has more than 256 include patterns"},
		{name: "ld.so.conf include patterns over a large folder", plant: func(t *testing.T, r string) {
			dir := filepath.Join(r, "etc/many")
			os.MkdirAll(dir, 0o755)
			for i := range 4000 {
				os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), nil, 0o644)
			}
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte("include"+strings.Repeat(" /etc/many/x*", 20)+"\n"), 0o644)
		}, want: "its include patterns match against more than 65536 names in all"},
		{name: "aux-cache FIFO", plant: func(t *testing.T, r string) {
			mkfifo(t, filepath.Join(r, "var/cache/ldconfig/aux-cache"))
		}},
		{name: "FIFO named libx.so.1 in a library folder", plant: func(t *testing.T, r string) {
			mkfifo(t, filepath.Join(r, libDir, "libx.so.1"))
		}},
		{name: "link to a FIFO in a library folder ld.so.conf names", plant: func(t *testing.T, r string) {
			mkfifo(t, filepath.Join(r, libDir, "fifo"))
			os.Symlink("fifo", filepath.Join(r, libDir, "libx.so.1"))
			os.WriteFile(filepath.Join(r, "etc/ld.so.conf"), []byte(libDir+"\n"), 0o644)
		}, want: "killed after 2s", fails: true, timeout: true},
		// With no cache and no ld.so.conf, the hook writes the cache
		// itself: ldconfig, and the FIFO, are never reached.
		{name: "link to a FIFO in a library folder, no ld.so.conf", plant: func(t *testing.T, r string) {
			mkfifo(t, filepath.Join(r, libDir, "fifo"))
			os.Symlink("fifo", filepath.Join(r, libDir, "libx.so.1"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, root := bundle(t)
			os.MkdirAll(filepath.Join(root, "etc"), 0o755)
			if tc.cache {
				imageCache(t, root)
			}
			tc.plant(t, root)
			cmd := exec.Command(bin, "setup", "--link", "libcuda.so.580.65.06::"+libDir+"/libcuda.so.1",
				"--library", libDir+"/libcuda.so.1", "--folder", libDir, "--ldconfig-timeout", "2s")
			cmd.Stdin = strings.NewReader(`{"bundle":"` + b + `"}`)
			// One P, as the spec runs the hook: the ldconfig timeout
			// must fire with the hook's goroutine waiting on it.
			cmd.Env = []string{"GOMAXPROCS=1"}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
			t.Logf("%v, peak RSS %d KiB: %s", took.Round(time.Millisecond), rss>>10, strings.TrimSpace(stderr.String()))
			if (err != nil) != tc.fails {
				t.Errorf("exit %v, want failure %v: %s", err, tc.fails, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr.String()), "\n"); n > 0 {
				t.Errorf("more than one line: %q", stderr.String())
			}
			limit := time.Second
			if tc.timeout {
				limit = 3 * time.Second
			}
			if took > limit {
				t.Errorf("took %v, want under %v", took, limit)
			}
			if rss > 64<<20 {
				t.Errorf("peak RSS %d MiB, want under 64 MiB", rss>>20)
			}
			if tc.crafted {
				// What the hook writes is bounded by what it read.
				if st, err := os.Stat(filepath.Join(root, "etc/ld.so.cache")); err != nil || st.Size() > 2*int64(len(overlappingCache())) {
					t.Errorf("wrote %v bytes (%v) from a %d-byte cache", st.Size(), err, len(overlappingCache()))
				}
			} else if !tc.fails {
				if out := ldconfigP(t, root); !strings.Contains(out, "libcuda.so.1 (libc6,x86-64) => "+libDir+"/libcuda.so.1") {
					t.Errorf("ldconfig -p:\n%s", out)
				}
			}
			if after := snapshot(t, outside); after != before {
				t.Fatalf("the host folder changed:\n%s", after)
			}
		})
	}
}

// TestLdconfigLimits checks what the ldconfig child runs with: the memory
// and file-size limits from its first instruction, an empty environment,
// stdin from /dev/null.
func TestLdconfigLimits(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report")
	probe := filepath.Join(dir, "ldconfig")
	os.WriteFile(probe, []byte("#!/bin/sh\n{ ulimit -v; ulimit -f; readlink /proc/self/fd/0; env; } > "+report+"\nexec /sbin/ldconfig \"$@\"\n"), 0o755)
	b, _ := bundle(t)
	var stderr strings.Builder
	err := Setup(&Env{Stdin: strings.NewReader(`{"bundle":"` + b + `"}`), Stderr: &stderr},
		SetupOptions{Folders: []string{libDir}, Ldconfig: probe, Limits: Limits{Memory: 300 << 20, FileSize: 1 << 20}})
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	got, _ := os.ReadFile(report)
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	// dash's ulimit -v counts KiB, -f 512-byte blocks; env prints PWD only.
	want := []string{"307200", "2048", "/dev/null", "PWD=/"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("ldconfig ran with %q, want %q", lines, want)
	}
}

// TestLdconfigFailureLeavesNoTemp: an ldconfig that fails writing the
// cache (here past the file-size limit, as on a full root) leaves no
// etc/ld.so.cache~ in the image.
func TestLdconfigFailureLeavesNoTemp(t *testing.T) {
	b, root := bundle(t)
	var stderr strings.Builder
	err := Setup(&Env{Stdin: strings.NewReader(`{"bundle":"` + b + `"}`), Stderr: &stderr},
		SetupOptions{Folders: []string{libDir}, Ldconfig: "/sbin/ldconfig", Limits: Limits{Memory: 300 << 20, FileSize: 16}})
	if err == nil {
		t.Fatalf("ldconfig wrote a cache within 16 bytes: %s", stderr.String())
	}
	if _, serr := os.Lstat(filepath.Join(root, "etc/ld.so.cache~")); serr == nil {
		t.Errorf("ld.so.cache~ left in the image after %v", err)
	}
}
