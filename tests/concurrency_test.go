package tests

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestPodmanFiftyReplicas starts 50 containers at once, each with its own
// MIG replica of a fully shared host: every one must start and see exactly
// its own device's nodes.
func TestPodmanFiftyReplicas(t *testing.T) {
	driverRoot, p := fakeDriverRoot(t, "dgx-h100-mig")
	vendor := uniqueVendor()
	spec := systemSpecPath(t, vendor)
	cfg := writeConfig(t, "[[sharing]]\ndevices = [\"all\"]\nstrategy = \"time-slicing\"\nreplicas = 8\n")
	run(t, bin("gpuctk"), "cdi", "generate", "--simulate", "dgx-h100-mig", "--driver-root", driverRoot,
		"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", cfg)
	rootfs := busyboxRoot(t, true)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		// Container i takes replica i%8 of MIG device i (mig-0 .. mig-49).
		gpu, mig := i/7, i%7
		m := p.GPUs[gpu].MIG[mig]
		gi := 3 + gpu*135 + m.GI*9
		want := sortedFields(fmt.Sprintf("/dev/nvidia%d /dev/nvidia-caps/nvidia-cap%d /dev/nvidia-caps/nvidia-cap%d", gpu, gi, gi+1+m.CI))
		device := fmt.Sprintf("%s/gpu=mig-%d::%d", vendor, i, i%8)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := podman(t, rootfs, []string{"--device", device},
				`echo $(ls /dev/nvidia[0-9]* /dev/nvidia-caps/*); /sbin/ldconfig -p | grep -c libcuda.so.1`)
			if err != nil {
				errs <- fmt.Errorf("%s: %v: %s", device, err, out)
				return
			}
			if l := lines(out); len(l) != 2 || sortedFields(l[0]) != want || l[1] != "1" {
				errs <- fmt.Errorf("%s: got %q, want nodes %q and libcuda in the cache", device, out, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSpecRewrittenWhileStarting rewrites the spec 1,000 times with
// gpuctk cdi generate while containers start one after another: no start
// may fail with a torn or missing spec.
func TestSpecRewrittenWhileStarting(t *testing.T) {
	driverRoot, _ := fakeDriverRoot(t, "h100")
	vendor := uniqueVendor()
	spec := systemSpecPath(t, vendor)
	args := []string{"cdi", "generate", "--simulate", "h100", "--driver-root", driverRoot,
		"--vendor", vendor, "--hook-path", bin("gpuctk-hook"), "--output", spec, "--config", writeConfig(t, "")}
	run(t, bin("gpuctk"), args...)
	rootfs := busyboxRoot(t, false)
	var done atomic.Bool
	var rewrites atomic.Int64
	genErr := make(chan error, 1)
	go func() {
		defer done.Store(true)
		for i := 0; i < 1000; i++ {
			if out, err := exec.Command(bin("gpuctk"), args...).CombinedOutput(); err != nil {
				genErr <- fmt.Errorf("rewrite %d: %v: %s", i, err, out)
				return
			}
			rewrites.Add(1)
		}
	}()
	starts := 0
	for !done.Load() {
		out, err := podman(t, rootfs, []string{"--device", vendor + "/gpu=mig-3"}, "ls /dev/nvidia-caps | wc -l")
		if err != nil || strings.TrimSpace(out) != "2" {
			t.Fatalf("start %d (after %d rewrites): %v: %s", starts, rewrites.Load(), err, out)
		}
		starts++
	}
	select {
	case err := <-genErr:
		t.Fatal(err)
	default:
	}
	t.Logf("%d containers started during %d rewrites", starts, rewrites.Load())
	if starts < 5 {
		t.Errorf("only %d containers started while the spec was rewritten", starts)
	}
	if entries, _ := os.ReadDir("/var/run/cdi"); len(entries) > 0 {
		for _, e := range entries {
			if strings.Contains(e.Name(), vendor) && strings.Contains(e.Name(), ".tmp") {
				t.Errorf("temp file left in /var/run/cdi: %s", e.Name())
			}
		}
	}
}

func sortedFields(s string) string {
	f := strings.Fields(s)
	sort.Strings(f)
	return strings.Join(f, " ")
}
