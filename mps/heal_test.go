package mps

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctk/gpuctk/config"
)

// TestManagerHeal: Heal restarts a daemon whose control socket a tenant
// removed, one that hangs (stopped with SIGSTOP) and one that died, each
// within 10 s, saying what it found; a daemon that answers, and a device
// an administrator stopped, are left alone.
func TestManagerHeal(t *testing.T) {
	m, state := newManager(t, driverRootWith(t, ""))
	devs := dgxDevices(t, state, config.Sharing{Devices: []string{"0", "1", "2", "3"}, Strategy: config.MPS, Replicas: 2})
	res, err := m.Start(t.Context(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if healed, err := m.Heal(t.Context(), devs); err != nil || len(healed) != 0 {
		t.Fatalf("Heal with every daemon answering = %+v, %v", healed, err)
	}
	// GPU 0 loses its socket, GPU 1's daemon hangs, GPU 2's dies, GPU 3
	// is stopped by an administrator.
	if err := os.Remove(devs[0].ControlSocket()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(res[1].PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := m.kill(devs[2], res[2].PID); err != nil {
		t.Fatal(err)
	}
	// (Stop stops every device: GPU 3's alone, as stop does each.)
	ctl, _ := FindControl(m.driverRoot)
	if _, err := m.stop(t.Context(), ctl, devs[3]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	healed, err := m.Heal(t.Context(), devs)
	if d := time.Since(start); d > 10*time.Second-HealInterval {
		t.Errorf("Heal took %s", d)
	} else {
		t.Logf("Heal took %s", d.Round(10*time.Millisecond))
	}
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("restarted: its daemon (pid %d) lost its control socket %s", res[0].PID, devs[0].ControlSocket()),
		fmt.Sprintf("restarted: its daemon (pid %d) does not answer on its control socket %s", res[1].PID, devs[1].ControlSocket()),
		"restarted: its daemon was gone",
	}
	if len(healed) != 3 {
		t.Fatalf("Heal = %+v, want 3 restarted", healed)
	}
	for i, r := range healed {
		if r.Device.UUID() != devs[i].UUID() || r.Action != want[i] || !alive(r.PID) || r.PID == res[i].PID {
			t.Errorf("%s: %+v, want %q", devs[i], r, want[i])
		}
		if !m.answers(t.Context(), ctl, devs[i]) {
			t.Errorf("%s: the new daemon does not answer", devs[i])
		}
		if strings.Contains(r.Action, "\n") {
			t.Errorf("%s: %q is more than one line", devs[i], r.Action)
		}
	}
	for i := range 3 {
		if alive(res[i].PID) {
			t.Errorf("%s: the old daemon %d still runs", devs[i], res[i].PID)
		}
	}
	if m.pid(devs[3]) != 0 {
		t.Errorf("%s, stopped by an administrator, was started again", devs[3])
	}
}
