package filekind

import (
	"io/fs"
	"testing"
)

func TestName(t *testing.T) {
	for _, tc := range []struct {
		m    fs.FileMode
		want string
	}{
		{0o644, "a regular file"},
		{fs.ModeDir | 0o755, "a folder"},
		{fs.ModeSymlink | 0o777, "a symbolic link"},
		{fs.ModeNamedPipe | 0o644, "a FIFO"},
		{fs.ModeSocket | 0o755, "a socket"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "a character device"},
		{fs.ModeDevice | 0o660, "a block device"},
		{fs.ModeIrregular, "a file of an unknown type"},
	} {
		if got := Name(tc.m); got != tc.want {
			t.Errorf("Name(%v) = %q, want %q", tc.m, got, tc.want)
		}
	}
}
