package main

import (
	"testing"
	"time"
)

func TestMedianCI(t *testing.T) {
	runs := func(n int) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			// Out of order, as runs come.
			d[i] = time.Duration((i*37)%n+1) * time.Millisecond
		}
		return d
	}
	for _, tc := range []struct {
		n    int
		want string
	}{
		{5, "—"},                // too few runs to say
		{25, "8.00 – 18.0 ms"},  // j = 7.6 -> 8, k = 18.4 -> 18
		{100, "40.0 – 61.0 ms"}, // j = 40.2 -> 40, k = 60.8 -> 61
	} {
		if got := medianCI(runs(tc.n)); got != tc.want {
			t.Errorf("n = %d: medianCI = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestPairedDiffs(t *testing.T) {
	base := &sample{times: []time.Duration{10, 20, 30}}
	s := &sample{times: []time.Duration{12, 19, 35}}
	d := pairedDiffs(base, s)
	if len(d) != 3 || d[0] != 2 || d[1] != -1 || d[2] != 5 {
		t.Errorf("pairedDiffs = %v, want [2 -1 5]", d)
	}
	if d := pairedDiffs(base, &sample{times: []time.Duration{1}}); d != nil {
		t.Errorf("runs of different counts paired: %v", d)
	}
}
