package plural

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 GPUs"}, {1, "1 GPU"}, {2, "2 GPUs"}, {-1, "-1 GPUs"}} {
		if got := Count(tc.n, "GPU"); got != tc.want {
			t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
