package hook

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpuctk/gpuctk/internal/filekind"
)

// imageDir is a folder of the image files are read from: an *os.Root or
// a dirFD.
type imageDir interface {
	Lstat(name string) (fs.FileInfo, error)
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
}

var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("over the size limit")
)

// readImageFile reads name, a path inside root that the image controls,
// shown in messages as shown (its path in the container).
// A FIFO, a device, a socket or a link as the last component would block,
// never end, or lead elsewhere: the file is checked before it is opened,
// opened without following a link or blocking, and checked again on the
// descriptor (it may have been swapped in between). At most max bytes are
// read, so a sparse or growing file costs no more than that.
func readImageFile(root imageDir, name, shown string, max int64) ([]byte, error) {
	check := func(st fs.FileInfo) error {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s is %s, %w", shown, filekind.Name(st.Mode()), errNotRegular)
		}
		if st.Size() > max {
			return fmt.Errorf("%s is %d bytes, %w of %d bytes", shown, st.Size(), errTooLarge, max)
		}
		return nil
	}
	st, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if err := check(st); err != nil {
		return nil, err
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link, %w", shown, errNotRegular)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(st); err != nil {
		return nil, err
	}
	if err := notPseudo(f, shown); err != nil {
		return nil, err
	}
	// One read into a buffer of the size fstat gave, plus one byte to see
	// the end (or a file that grew, which is refused past max).
	data := make([]byte, 0, st.Size()+1)
	for {
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return data, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", shown, err)
		}
		if len(data) == cap(data) {
			if int64(len(data)) > max {
				return nil, fmt.Errorf("%s grew while read, %w of %d bytes", shown, errTooLarge, max)
			}
			data = slices.Grow(data, min(int(max)+1-len(data), len(data)))
		}
	}
}

// notPseudo refuses a file of the kernel's interfaces (procfs, sysfs,
// tracefs and the like), which the image reaches through their mounts in
// its root (the runtime mounts /proc there before createContainer hooks,
// and masks its files only later): such a "regular file" of size 0 may
// block its reader for good (/proc/kmsg, tracefs's trace_pipe) or take
// from the host what its own readers wait for, and is no image's
// configuration.
func notPseudo(f *os.File, shown string) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var sfs unix.Statfs_t
	var serr error
	if err := conn.Control(func(fd uintptr) { serr = unix.Fstatfs(int(fd), &sfs) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("%s: %w", shown, serr)
	}
	switch uint64(sfs.Type) {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.TRACEFS_MAGIC, unix.DEBUGFS_MAGIC,
		unix.SECURITYFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC, unix.BPF_FS_MAGIC,
		unix.PSTOREFS_MAGIC, unix.EFIVARFS_MAGIC, unix.BINFMTFS_MAGIC, unix.SELINUX_MAGIC, unix.SMACK_MAGIC,
		configfsMagic, fusectlMagic:
		return fmt.Errorf("%s is a file of the kernel's (file system type %#x), %w", shown, uint64(sfs.Type), errNotRegular)
	}
	return nil
}

// File system types x/sys/unix does not name (linux/magic.h).
const (
	configfsMagic = 0x62656570
	fusectlMagic  = 0x65735543
)

// Bounds on the image's ld.so.conf: ldconfig reads it and every file it
// includes, with no limit on their kind, size, number or nesting (a file
// that includes itself recurses until ldconfig crashes).
const (
	maxConfSize     = 1 << 20 // per file; Debian's are a few dozen bytes
	maxConfFiles    = 256     // files read in all
	maxConfDepth    = 8       // include nesting
	maxConfDirNames = 4096    // names read from each folder an include globs
	maxConfFolders  = 1024    // library folders named in all
	maxConfPatterns = 256     // include patterns in all
	maxConfMatched  = 1 << 16 // names matched against include patterns in all
)

// ldConf is what the hook found in the image's ld.so.conf.
type ldConf struct {
	// Folders are the library folders it names, in order.
	Folders []string
	// Problem says why ldconfig must not read the configuration itself (a
	// file it includes would block it, or the whole is past the bounds);
	// empty when it may.
	Problem string
	// files, patterns and matched count what the bounds above bound.
	files, patterns, matched int
}

// readLdConf reads /etc/ld.so.conf and what it includes as ldconfig does
// (comments from #, "include GLOB...", "hwcap" lines ignored, any other
// line a folder, relative ones left out), through readImageFile and within
// the bounds above.
func readLdConf(root *os.Root) ldConf {
	var c ldConf
	c.read(root, "etc/ld.so.conf", 0)
	return c
}

func (c *ldConf) fail(format string, args ...any) {
	if c.Problem == "" {
		c.Problem = fmt.Sprintf(format, args...)
	}
}

func (c *ldConf) read(root *os.Root, name string, depth int) {
	// Counted only when read: the calls still under way when the bound is
	// reached (each include's other matches) each fail here, reading
	// nothing.
	if c.files >= maxConfFiles {
		c.fail("/etc/ld.so.conf includes more than %d files", maxConfFiles)
		return
	}
	c.files++
	if depth > maxConfDepth {
		c.fail("/etc/ld.so.conf nests includes deeper than %d (/%s)", maxConfDepth, name)
		return
	}
	data, err := readImageFile(root, name, "/"+name, maxConfSize)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		c.fail("%v", err)
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxConfSize+1)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		word, rest, _ := strings.Cut(line, " ")
		if w, r, ok := strings.Cut(line, "\t"); ok && len(w) < len(word) {
			word, rest = w, r
		}
		switch {
		case line == "":
		case word == "include" && rest != "":
			for _, pattern := range strings.Fields(rest) {
				// Each pattern is a folder's listing matched: a
				// file of patterns matching nothing costs no file
				// read, and is bounded here.
				if c.patterns++; c.patterns > maxConfPatterns {
					c.fail("/etc/ld.so.conf has more than %d include patterns", maxConfPatterns)
					return
				}
				if !path.IsAbs(pattern) {
					pattern = path.Join("/", path.Dir(name), pattern)
				}
				for _, inc := range c.glob(root, strings.TrimPrefix(path.Clean(pattern), "/")) {
					c.read(root, inc, depth+1)
				}
			}
		case word == "hwcap":
		case !path.IsAbs(line):
			// Not a folder ldconfig builds a cache of ("relative path
			// used to build cache" on its command line), and "-r/" or
			// "-C/etc/shadow" read as its options there.
		default:
			if len(c.Folders) >= maxConfFolders {
				c.fail("/etc/ld.so.conf names more than %d folders", maxConfFolders)
				return
			}
			c.Folders = append(c.Folders, line)
		}
	}
}

// glob expands an include pattern inside root, sorted as glob(3) does.
// Only the last component may hold wildcards, as in every distribution's
// "include /etc/ld.so.conf.d/*.conf".
func (c *ldConf) glob(root *os.Root, pattern string) []string {
	dir, base := path.Split(pattern)
	dir = strings.TrimSuffix(dir, "/")
	if strings.ContainsAny(dir, `*?[\`) {
		c.fail("/etc/ld.so.conf: include %q has wildcards before its last component", "/"+pattern)
		return nil
	}
	if !strings.ContainsAny(base, `*?[\`) {
		return []string{pattern}
	}
	if dir == "" {
		dir = "."
	}
	// O_DIRECTORY and O_NONBLOCK: a FIFO planted as the folder fails at
	// once instead of blocking the open.
	f, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		c.fail("/etc/ld.so.conf: include /%s: %v", pattern, err)
		return nil
	}
	defer f.Close()
	names, err := f.Readdirnames(maxConfDirNames + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		c.fail("/etc/ld.so.conf: include /%s: %v", pattern, err)
		return nil
	}
	if len(names) > maxConfDirNames {
		c.fail("/etc/ld.so.conf: include /%s: more than %d names in /%s", pattern, maxConfDirNames, dir)
		return nil
	}
	if c.matched += len(names); c.matched > maxConfMatched {
		c.fail("/etc/ld.so.conf: its include patterns match against more than %d names in all", maxConfMatched)
		return nil
	}
	var out []string
	for _, n := range names {
		if ok, err := path.Match(base, n); err != nil {
			c.fail("/etc/ld.so.conf: include /%s: %v", pattern, err)
			return nil
		} else if ok {
			out = append(out, path.Join(dir, n))
		}
	}
	slices.Sort(out)
	return out
}
