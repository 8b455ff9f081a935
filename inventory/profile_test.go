package inventory

import (
	"strings"
	"testing"
)

func TestEmbeddedProfiles(t *testing.T) {
	want := map[string]struct{ gpus, mig int }{
		"dgx-a100":     {8, 16},
		"h100":         {1, 7},
		"l40s":         {4, 0},
		"dgx-h100-mig": {8, 56},
		"p100":         {2, 0},
		"h200":         {1, 0},
		"a30":          {1, 4},
	}
	names := Profiles()
	if len(names) != len(want) {
		t.Fatalf("profiles = %v, want %d of them", names, len(want))
	}
	for _, name := range names {
		p, err := LoadProfile(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h, _ := p.Host()
		mig := 0
		for _, g := range h.GPUs {
			mig += len(g.MIG)
		}
		if w := want[name]; len(h.GPUs) != w.gpus || mig != w.mig {
			t.Errorf("%s: %d GPUs, %d MIG devices; want %d, %d", name, len(h.GPUs), mig, w.gpus, w.mig)
		}
		// NUMA nodes agree with the topology: GPUs within a NUMA
		// node's distance share one, GPUs across sockets do not.
		for _, g := range h.GPUs {
			for _, o := range h.GPUs {
				if g.NUMANode == nil || o.NUMANode == nil || len(g.Distance) == 0 {
					continue
				}
				if same, d := *g.NUMANode == *o.NUMANode, h.Distance(g.Index, o.Index); same != (d <= TopologyNUMANode) {
					t.Errorf("%s: GPUs %d and %d are at distance %d on NUMA nodes %d and %d", name, g.Index, o.Index, d, *g.NUMANode, *o.NUMANode)
				}
			}
		}
	}
}

func TestProfileErrors(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"unknown key", "driver-version = \"1\"\ncolour = 3\n", "unknown key"},
		{"bad syntax", "driver-version = \n", "line 1"},
		{"no driver", "[[gpu]]\nuuid = \"GPU-1\"\n", "driver version is empty"},
		{"duplicate uuid", "driver-version = \"1\"\n[[gpu]]\nindex = 0\nminor = 0\nuuid = \"GPU-1\"\n[[gpu]]\nindex = 1\nminor = 1\nuuid = \"GPU-1\"\n", "used twice"},
		{"distance count", "driver-version = \"1\"\n[[gpu]]\nindex = 0\nminor = 0\nuuid = \"GPU-0\"\ndistance = [0]\n[[gpu]]\nindex = 1\nminor = 1\nuuid = \"GPU-1\"\ndistance = [10, 0]\n", "want one per GPU"},
		{"distance level", "driver-version = \"1\"\n[[gpu]]\nindex = 0\nminor = 0\nuuid = \"GPU-0\"\ndistance = [0, 15]\n[[gpu]]\nindex = 1\nminor = 1\nuuid = \"GPU-1\"\ndistance = [15, 0]\n", "want 0, 10, 20"},
		{"distance to itself", "driver-version = \"1\"\n[[gpu]]\nindex = 0\nminor = 0\nuuid = \"GPU-0\"\ndistance = [10, 10]\n[[gpu]]\nindex = 1\nminor = 1\nuuid = \"GPU-1\"\ndistance = [10, 0]\n", "to itself: want 0"},
		{"distance asymmetric", "driver-version = \"1\"\n[[gpu]]\nindex = 0\nminor = 0\nuuid = \"GPU-0\"\ndistance = [0, 10]\n[[gpu]]\nindex = 1\nminor = 1\nuuid = \"GPU-1\"\ndistance = [20, 0]\n", "the same both ways"},
		{"numa-node negative", "driver-version = \"1\"\n[[gpu]]\nuuid = \"GPU-1\"\nnuma-node = -1\n", "numa-node -1: want 0 or more"},
		{"mig on non-mig", "driver-version = \"1\"\n[[gpu]]\nuuid = \"GPU-1\"\n[[gpu.mig-device]]\nuuid = \"MIG-1\"\n", "MIG is disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProfile([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := LoadProfile("nope"); err == nil || !strings.Contains(err.Error(), "dgx-a100") {
		t.Fatalf("unknown profile: err = %v, want the list of known ones", err)
	}
}
