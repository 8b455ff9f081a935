package driver

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// A driver installed under a prefix of its own (/usr/local/nvidia on a
// squashfs, GKE's /home/kubernetes/bin/nvidia) keeps its files in folders
// that hold nothing else. Where the driver folder cannot be made of hard
// links (another file system), such a folder is mounted whole instead, with
// the hook's links into it as into the driver folder: one mount, nothing
// written, and nothing exposed but the driver's own files.

// ownTree bounds the walk that tells a folder holds only the driver's
// files: a driver prefix holds some 100 entries, and a folder with more,
// or deeper, is not one (nor worth the reads).
const (
	ownMaxEntries = 1024
	ownMaxDepth   = 4
)

// otherDriverFiles are files of the driver's installer that gpuctk does
// not hand to containers, under names that carry no driver version; a
// folder holding them holds only the driver's files still.
var otherDriverFiles = []string{
	"libnvidia-api.so.1", "libnvidia-nvvm70.so.4",
	"nvidia-installer", "nvidia-uninstall", "nvidia-settings", "nvidia-xconfig", "nvidia-modprobe",
	"nvidia-bug-report.sh", "nvidia-ngx-updater", "nvidia-powerd", "nvidia-pcc",
}

// driverName reports whether name is one of the driver's files: a
// library of the driver or a link to one (IsLibrary), one of its
// programs, data files or GSP firmware files, an installer file of
// otherDriverFiles, or any name that carries the driver version
// (libnvidia-gtk3.so.580.65.06, nvidia-application-profiles-580.65.06-rc).
func driverName(name, version string) bool {
	switch {
	case IsLibrary(name), slices.Contains(binaries, name), slices.Contains(otherDriverFiles, name):
		return true
	case strings.HasPrefix(name, "gsp") && strings.HasSuffix(name, ".bin"):
		return true
	case version != "" && carries(name, version):
		return true
	}
	for _, d := range dataFiles {
		for _, p := range d.paths {
			if path.Base(strings.ReplaceAll(p, "%v", version)) == name {
				return true
			}
		}
	}
	return false
}

// carries reports whether name holds version as a whole component,
// between the name's ends, dots, dashes or underscores.
func carries(name, version string) bool {
	for i := 0; ; {
		j := strings.Index(name[i:], version)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(version)
		if (start == 0 || strings.ContainsRune(".-_", rune(name[start-1]))) &&
			(end == len(name) || strings.ContainsRune(".-_", rune(name[end]))) {
			return true
		}
		i = start + 1
	}
}

// ownFolders tells which host folders hold only the driver's files, and
// remembers each answer: Gather asks for the same folders for every file.
type ownFolders struct {
	version string
	root    Root
	known   map[string]bool
}

// holdsOnlyDriver reports whether dir holds only the driver's files, as
// a container given it mounted whole would see them: each regular file a
// driverName, each link relative and leading nowhere above dir, each
// sub-folder on dir's own file system (a plain bind shows no mounts under
// it) and holding only the driver's files itself; no socket, FIFO or
// device; within ownMaxEntries entries and ownMaxDepth levels.
func (o *ownFolders) holdsOnlyDriver(dir string) bool {
	if ok, seen := o.known[dir]; seen {
		return ok
	}
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	budget := ownMaxEntries
	ok := o.walk(dir, "", st.Dev, 0, &budget)
	if o.known == nil {
		o.known = map[string]bool{}
	}
	o.known[dir] = ok
	return ok
}

func (o *ownFolders) walk(top, rel string, dev uint64, depth int, budget *int) bool {
	if depth > ownMaxDepth {
		return false
	}
	entries, err := os.ReadDir(filepath.Join(top, rel))
	if err != nil {
		return false
	}
	if *budget -= len(entries); *budget < 0 {
		return false
	}
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(top, rel, name)
		switch e.Type() {
		case 0:
			if !driverName(name, o.version) {
				return false
			}
		case os.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil || path.IsAbs(target) {
				return false
			}
			if to := path.Join(rel, target); to == ".." || strings.HasPrefix(to, "../") {
				return false
			}
		case os.ModeDir:
			var st unix.Stat_t
			if unix.Lstat(p, &st) != nil || st.Dev != dev || !o.walk(top, filepath.Join(rel, name), dev, depth+1, budget) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// shared reports whether rel (a folder, relative to the driver root) is
// one a distribution or an image fills with files of its own, or above
// one: the library and program folders searched (LibDirs and BinDirs,
// /usr/local/nvidia's aside), the folders of the driver's data files
// (Vulkan's, glvnd's, Xorg's), /etc and /usr/share. A fake root may hold
// only the driver's files there; a host never does, and a folder that
// gets other files later must not show them to every container.
func shared(rel string) bool {
	rel = "/" + filepath.ToSlash(rel)
	var folders []string
	for _, d := range append(LibDirs[:len(LibDirs):len(LibDirs)], BinDirs...) {
		if !strings.HasPrefix(d, "/usr/local/nvidia/") {
			folders = append(folders, d)
		}
	}
	for _, d := range dataFiles {
		for _, p := range d.paths {
			folders = append(folders, path.Dir(p))
		}
	}
	folders = append(folders, "/etc", "/usr/share", "/lib/firmware", "/usr/lib/firmware")
	for _, d := range folders {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			return true
		}
	}
	return false
}

// mountable returns the folder to mount whole for a file of the driver at
// host path p: the highest folder above it, up to a folder of the driver
// root (never the root itself) and on p's file system, that holds only
// the driver's files (a prefix such as /usr/local/nvidia, whose lib64/
// and bin/ then come in one mount) and is not shared; "" when p's own
// folder holds anything else or is shared. With own set, p's own folder or nothing (the firmware's, mounted
// where the host has it).
func (o *ownFolders) mountable(p string, own bool) string {
	dir := filepath.Dir(p)
	if rel, under := o.root.Rel(dir); !under || rel == "." || shared(rel) || !o.holdsOnlyDriver(dir) {
		return ""
	}
	if own {
		return dir
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return ""
	}
	for {
		up := filepath.Dir(dir)
		var ust unix.Stat_t
		if rel, _ := o.root.Rel(up); rel == "." || shared(rel) || unix.Stat(up, &ust) != nil || ust.Dev != st.Dev || !o.holdsOnlyDriver(up) {
			return dir
		}
		dir = up
	}
}
