package fakehost

import (
	"os"
	"syscall"
)

// Unfit are files that others may leave where gpuctk reads files they
// control (a CDI spec dir, a driver root), each made at a path by Make:
// reading one as os.ReadFile does blocks for ever (a FIFO with no
// writer), never ends (/dev/zero, by a link or a node of its numbers;
// making the node needs root) or takes a GiB of memory. Says is what a
// message about it names it ("" for the sparse file: its words are the
// reader's).
var Unfit = []struct {
	Name, Says string
	Make       func(path string) error
}{
	{"FIFO", "a FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
	{"link to /dev/zero", "a character device", func(p string) error { return os.Symlink("/dev/zero", p) }},
	{"endless device node", "a character device", func(p string) error {
		return syscall.Mknod(p, syscall.S_IFCHR|0o644, 1<<8|5) // /dev/zero's 1:5
	}},
	{"1 GiB sparse file", "", func(p string) error {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			return err
		}
		return os.Truncate(p, 1<<30)
	}},
}
