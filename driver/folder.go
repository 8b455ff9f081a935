package driver

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuctk/gpuctk/capability"
)

// A container start pays its runtime about a quarter of a millisecond for
// every file the spec mounts (runc 1.1 on ext4: the mount point made in
// the container's overlay, its path checked, two mount calls), some 5 ms
// for the two dozen files of a default spec. Gather puts the driver's
// regular files, as hard links, in one folder per capability under the
// driver root, which the spec mounts once; the hook then links each file's
// usual path to its place in that folder (--driver-file), at a few
// microseconds a link. Hard links, not copies: the same inodes the host
// runs, no extra space, and a folder that cannot be made (another file
// system, a read-only driver root) leaves the spec mounting each file.

// FolderStore is where, under the driver root, the folders of hard links
// are kept: one per driver version and set of files
// (<version>-<hash of the files' identities>), with a flat sub-folder per
// group of files: "core" (compute and utility, every container's),
// "firmware" (core's files mounted noexec) and one per other capability.
const FolderStore = "/var/lib/gpuctk/driver"

// FolderMounts is where a container sees those sub-folders:
// /usr/lib/gpuctk/core, /usr/lib/gpuctk/graphics, ...
//
// Short on purpose: the hook's links point there, and ext4 keeps a link
// whose target is under 60 bytes in its inode ("fast symlink"), where a
// longer one costs a data block: on this project's test disk, twice the
// time to create, and far more while the disk writes back.
// /usr/lib/gpuctk/core/ and the longest core file's name
// (libnvidia-ptxjitcompiler.so.580.105.08) take 59 bytes.
const FolderMounts = "/usr/lib/gpuctk"

// CoreGroup names the sub-folder of the spec's common edits, and
// FirmwareGroup the one of its files mounted noexec (the GSP firmware).
const (
	CoreGroup     = "core"
	FirmwareGroup = "firmware"
)

// LinkedFile is a driver file a container gets as a link into a folder
// mount: Path (absolute, where the file usually is) links to Target, its
// name in the folder mount.
type LinkedFile struct {
	Target string
	Path   string
}

// String is the hook's --driver-file argument: TARGET::PATH.
func (l LinkedFile) String() string { return l.Target + "::" + l.Path }

// folderMountOptions are the folder mounts': read-only, nosuid and nodev
// as every file mount, executable for the libraries and programs in it,
// and a plain bind, as the folder has no mounts under it. Files mounted
// noexec (the GSP firmware) go to a group of their own (see groupOf),
// whose folder is mounted noexec too.
var (
	folderMountOptions     = []string{"ro", "nosuid", "nodev", "bind"}
	dataFolderMountOptions = []string{"ro", "nosuid", "nodev", "noexec", "bind"}
)

// groupOf names the group of a file of the spec's common edits (base is
// CoreGroup) or of a capability's (its name), by its mount options.
func groupOf(base string, opts []string) string {
	switch {
	case !slices.Contains(opts, "noexec"):
		return base
	case base == CoreGroup:
		return FirmwareGroup
	}
	return base + "-data"
}

// gathered is a file Gather takes into a folder: its group, and its name
// there (the file's own, unless another file of the group has it).
type gathered struct {
	group, name string
	base        string // the group of the mounts it came from
	m           *specs.Mount
	st          unix.Stat_t
	// Where Gather puts it: in a host folder mounted whole (dir), in a
	// store folder (dir ""), or in a mount of its own (perFile).
	dir     string
	perFile bool
	// ref makes it, in a store folder, a link to the file where the
	// common edits mount its folder (relative to its group's mount).
	ref string
}

// options are the mount options of the folder g is in: executable for
// the libraries and programs, noexec for a group of files mounted so.
func (g *gathered) options() []string {
	if g.group != g.base {
		return dataFolderMountOptions
	}
	return folderMountOptions
}

// folderKey names the host folder mount g is in, when in one mounted
// whole: the folder and its options.
func (g *gathered) folderKey() string {
	return g.dir + "\x00" + strings.Join(g.options(), ",")
}

// Gather moves the regular files of f's mounts into folder mounts, the
// hook linking each file's usual path into them (f.Linked), and returns
// the driver folder the spec mounts ("" for none) and, when create was
// set, why some files stay mounted one by one (an error the caller
// reports, not a failure: the spec is right either way). Sockets, links
// and files outside the driver root always stay file mounts. In order:
//
//   - the driver folder of hard links under the driver root
//     (FolderStore), when it is there or, with create set, can be made:
//     every file on the folder's file system;
//   - else, group by group: a host folder that holds only the driver's
//     files mounted whole (see ownFolders), when one such mount gives the
//     group, or none beyond the common edits' for a capability's; a file
//     of the common edits outside such folders (a vendor file in /etc)
//     goes to the store alone;
//   - the other groups in a store folder (WithStore, else FolderStore
//     under the driver root) of hard links where they can be made, and
//     clones or copies otherwise, when it is there or, with create set,
//     can be made;
//   - where that store folder is missing, the driver's own folders that
//     can be mounted whole, each a mount, and the rest a mount per file.
//
// check and info (create unset) thus find what generate made, without
// writing anything.
func (f *Files) Gather(driverRoot string, create bool, opts ...FolderOption) (string, error) {
	var g gatherer
	for _, o := range opts {
		o(&g)
	}
	files := f.gatherable(driverRoot)
	if len(files) == 0 {
		return "", nil
	}
	linkStore := filepath.Join(driverRoot, FolderStore)
	dir := filepath.Join(linkStore, folderName(f.Version, files))
	if holds(dir, files) {
		f.useFolder(dir, files)
		return dir, nil
	}
	var why error
	if create {
		if why = g.makeFolder(dir, files, false); why == nil {
			f.useFolder(dir, files)
			return dir, nil
		}
	}

	// Group by group: in place, else into a store folder.
	own := &ownFolders{version: f.Version, root: Root(driverRoot)}
	at := inPlace(f.Version, files)
	common := map[string]string{} // mount point of each folder the common edits mount whole
	var stored []gathered
	for _, group := range groupsOf(files) {
		var members []int
		for i := range files {
			if files[i].group == group {
				members = append(members, i)
			}
		}
		keys := map[string]bool{}
		var loose []int // members in no folder that can be mounted whole
		for _, i := range members {
			files[i].dir = own.mountable(files[i].m.HostPath, at[group] != "")
			if files[i].dir == "" {
				loose = append(loose, i)
				continue
			}
			keys[files[i].folderKey()] = true
		}
		point := at[group]
		if point == "" {
			point = path.Join(FolderMounts, group)
		}
		base := files[members[0]].base
		if base == CoreGroup {
			// The common edits: one mount more at most.
			var fresh []string
			for k := range keys {
				if _, ok := common[k]; !ok {
					fresh = append(fresh, k)
				}
			}
			if len(keys) > 0 && len(fresh) <= 1 {
				for _, k := range fresh {
					common[k] = point
				}
				// What lies outside those folders (a vendor file in
				// /etc) goes into the store alone: a few small files
				// copied, not the driver's libraries.
				for _, i := range loose {
					stored = append(stored, files[i])
				}
				continue
			}
		} else if len(loose) == 0 && len(keys) == 1 {
			continue // a capability's one mount, of its own
		}
		// Into the store. A capability's file in a folder the common
		// edits mount whole is a link there: the capability still needs
		// a mount of its own, for its device (which CDI refuses without
		// edits) and for the hook, which links its files only in a
		// container that has their folder.
		for _, i := range members {
			if p, ok := common[files[i].folderKey()]; ok && files[i].dir != "" && base != CoreGroup {
				rel, _ := filepath.Rel(files[i].dir, files[i].m.HostPath)
				files[i].ref, _ = filepath.Rel(point, path.Join(p, filepath.ToSlash(rel)))
			}
			files[i].dir = ""
			stored = append(stored, files[i])
		}
	}
	if len(stored) > 0 {
		store := g.store
		if store == "" {
			store = linkStore
		}
		sdir := filepath.Join(store, folderName(f.Version, stored))
		switch {
		case holds(sdir, stored):
			why = nil
		case !create:
			sdir = ""
		case g.store != "" && !g.makeStore && !exists(g.store):
			why, sdir = fmt.Errorf("driver folder: the store %s does not exist (in a container, mount the host's folder there)", g.store), ""
		default:
			if why = g.makeFolder(sdir, stored, true); why != nil {
				sdir = ""
			}
		}
		if sdir != "" {
			f.useFolder(sdir, files)
			return sdir, nil
		}
		// No store folder: the files of the stored groups each go in
		// the driver's own folder that can be mounted whole, if any.
		for i := range files {
			if files[i].dir == "" {
				files[i].ref = ""
				files[i].dir = own.mountable(files[i].m.HostPath, at[files[i].group] != "")
				if files[i].dir == "" {
					files[i].perFile = true
				}
			}
		}
	}
	f.useFolder("", files)
	if !create || !slices.ContainsFunc(files, func(g gathered) bool { return g.perFile }) {
		return "", nil
	}
	return "", why
}

// groupsOf returns the groups of files, in the order first found.
func groupsOf(files []gathered) []string {
	var out []string
	for _, g := range files {
		if !slices.Contains(out, g.group) {
			out = append(out, g.group)
		}
	}
	return out
}

// gatherable returns the files of f's mounts that Gather can link: regular
// files (not links: a hard link to one would be the link, whose target
// the container resolves elsewhere) under the driver root.
func (f *Files) gatherable(driverRoot string) []gathered {
	var out []gathered
	taken := map[string]bool{} // group/name
	add := func(base string, mounts []*specs.Mount) {
		for _, m := range mounts {
			if _, under := Root(driverRoot).Rel(m.HostPath); !under || !path.IsAbs(m.ContainerPath) {
				continue
			}
			g := gathered{base: base, m: m}
			if unix.Lstat(m.HostPath, &g.st) != nil || g.st.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
			g.group = groupOf(base, m.Options)
			// Flat, for short link targets: a name two files share
			// (Vulkan's and Vulkan SC's nvidia_icd.json) is numbered.
			g.name = path.Base(m.ContainerPath)
			for i := 2; taken[g.group+"/"+g.name]; i++ {
				g.name = fmt.Sprintf("%d-%s", i, path.Base(m.ContainerPath))
			}
			taken[g.group+"/"+g.name] = true
			out = append(out, g)
		}
	}
	add(CoreGroup, f.Mounts)
	for _, c := range capability.Extra() {
		add(string(c), f.CapabilityMounts[c])
	}
	return out
}

// folderName names the folder of a set of files: the driver version, and
// a hash of each file's place and identity (device, inode, size,
// modification time; not the change time, which each hard link moves),
// so that a reinstalled or changed file gets a new folder, never an old
// one whose links hold the files it replaced.
func folderName(version string, files []gathered) string {
	h := sha256.New()
	h.Write([]byte("gpuctk driver folder 2\n"))
	var b [8]byte
	for _, g := range files {
		h.Write([]byte(g.group + "\x00" + g.name + "\x00" + g.m.ContainerPath + "\x00"))
		if g.ref != "" {
			h.Write([]byte("->" + g.ref + "\x00"))
		}
		for _, v := range []uint64{g.st.Dev, g.st.Ino, uint64(g.st.Size), uint64(g.st.Mtim.Nano())} {
			binary.LittleEndian.PutUint64(b[:], v)
			h.Write(b[:])
		}
	}
	if version == "" || strings.ContainsAny(version, "/\x00") || version[0] == '.' {
		version = "unknown"
	}
	return version + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// holds reports whether dir holds every file in its group's sub-folder:
// as the same inode, or as a copy (a regular file of its size and
// modification time; the folder's name hashes the file's identity, and
// makeFolder renames a folder into place only once every copy is on the
// disk).
func holds(dir string, files []gathered) bool {
	for _, g := range files {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(dir, g.group, g.name), &st) != nil {
			return false
		}
		if g.ref != "" {
			if to, err := os.Readlink(filepath.Join(dir, g.group, g.name)); err != nil || to != g.ref {
				return false
			}
			continue
		}
		same := st.Dev == g.st.Dev && st.Ino == g.st.Ino
		copied := st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == g.st.Size && st.Mtim == g.st.Mtim
		if !same && !copied {
			return false
		}
	}
	return true
}

// makeFolder makes dir with a hard link of each file (with copies set, a
// clone or a copy where no link can be made), whole or not at all: built
// under a temporary name beside it and renamed into place.
func (g *gatherer) makeFolder(dir string, files []gathered, copies bool) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("driver folder: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, tmpPrefix+filepath.Base(dir)+"-")
	if err != nil {
		return fmt.Errorf("driver folder: %w", err)
	}
	defer os.RemoveAll(tmp) // gone once renamed; what is left of a failure
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("driver folder: %w", err)
	}
	if err := g.fill(tmp, files, copies); err != nil {
		return err
	}
	// Another generate may have made it meanwhile: it stays, as a spec
	// may name it already and containers have it mounted (removing it
	// would empty their mount).
	if holds(dir, files) {
		return nil
	}
	// A folder left by a run that failed half-way, or of files that were
	// replaced in place, goes first: rename does not replace a folder
	// that holds anything.
	if _, err := os.Lstat(dir); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("driver folder: %w", err)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		if holds(dir, files) {
			return nil // another generate made it meanwhile
		}
		return fmt.Errorf("driver folder: %w", err)
	}
	// The spec written next names the folder: the rename must reach the
	// disk before it does.
	if d, err := os.Open(parent); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("driver folder: sync %s: %w", parent, err)
		}
	}
	return nil
}

// copyLabel gives dst the SELinux label of src, where there is one: a
// container's processes look files up through the group's folder, which
// must then be as readable to them as the driver's own library folder
// (a folder under /var/lib would otherwise have var_lib_t). The files,
// hard links, keep their own labels. Elsewhere it does nothing.
func copyLabel(src, dst string) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(src, selinuxXattr, buf)
	if err != nil || n <= 0 {
		return
	}
	unix.Lsetxattr(dst, selinuxXattr, buf[:n], 0) // best effort, as podman's relabel is
}

// selinuxXattr holds a file's SELinux label.
const selinuxXattr = "security.selinux"

// tmpPrefix starts the names of folders makeFolder is building.
const tmpPrefix = ".tmp-"

// useFolder replaces the mounts of files with one mount of each folder
// they are in: a host folder mounted whole (g.dir), else their group's
// sub-folder of store, mounted under FolderMounts or where inPlace says;
// files left perFile keep their mount. The common edits' folders serve
// the capabilities too. It lists the files as f.Linked for the hook, and
// the host folders mounted whole as f.Whole.
func (f *Files) useFolder(store string, files []gathered) {
	at := inPlace(f.Version, files)
	moved := map[*specs.Mount]bool{}
	added := map[string][]*specs.Mount{} // by base: the folder mounts
	points := map[string]string{}        // mount point by folder key: the common edits', then base+key
	numbered := map[string]int{}         // mount points of each group under FolderMounts
	for i := range files {
		g := &files[i]
		if g.perFile {
			f.OneByOne++
			continue
		}
		moved[g.m] = true
		host, rel := filepath.Join(store, g.group), g.name
		if g.dir != "" {
			host = g.dir
			rel, _ = filepath.Rel(g.dir, g.m.HostPath)
		}
		// A capability's folders are its own (see Gather).
		key := host + "\x00" + strings.Join(g.options(), ",")
		if g.base != CoreGroup {
			key = g.base + "\x00" + key
		}
		point, ok := points[key]
		if !ok {
			point = at[g.group]
			if point == "" {
				point = path.Join(FolderMounts, g.group)
				if n := numbered[g.group]; n > 0 {
					point = fmt.Sprintf("%s-%d", point, n+1)
				}
				numbered[g.group]++
			}
			points[key] = point
			added[g.base] = append(added[g.base], &specs.Mount{HostPath: host, ContainerPath: point, Options: g.options()})
			if g.dir != "" && !slices.Contains(f.Whole, host) {
				f.Whole = append(f.Whole, host)
			}
		}
		if target := path.Join(point, filepath.ToSlash(rel)); target != path.Clean(g.m.ContainerPath) {
			f.Linked = append(f.Linked, LinkedFile{Target: target, Path: path.Clean(g.m.ContainerPath)})
		}
	}
	rest := func(base string, mounts []*specs.Mount) []*specs.Mount {
		out := added[base]
		for _, m := range mounts {
			if !moved[m] {
				out = append(out, m)
			}
		}
		return out
	}
	f.Mounts = rest(CoreGroup, f.Mounts)
	for _, c := range capability.Extra() {
		if m, ok := f.CapabilityMounts[c]; ok {
			f.CapabilityMounts[c] = rest(string(c), m)
		}
	}
}

// inPlace returns, by group, the folder a container sees the group's sub-folder
// mounted at instead of under FolderMounts: the one folder its files all
// sit in, under their own names, when that folder is named for the driver
// version (the GSP firmware's /lib/firmware/nvidia/580.65.06). No image
// has files of its own there to hide, and the container sees the files
// where the host has them, as with a mount per file, with no link for the
// hook to make: each new name in a container's root is an inode in its
// overlay's upper layer, which on a disk with many recent deletions costs
// a container start more than the mount.
func inPlace(version string, files []gathered) map[string]string {
	at := map[string]string{}
	for _, g := range files {
		dir, name := path.Split(path.Clean(g.m.ContainerPath))
		dir = path.Clean(dir)
		if have, seen := at[g.group]; seen && have != dir || name != g.name || version == "" || path.Base(dir) != version {
			dir = ""
		}
		at[g.group] = dir
	}
	for g, dir := range at {
		if dir == "" {
			delete(at, g)
		}
	}
	return at
}

// PruneFolders removes the folders beside keep (in the store Gather made
// it in) of other driver versions than keep's (a folder's name starts with its
// version), and folders left half-built an hour ago or more. A driver
// upgrade reloads the kernel module, which no container can be using:
// the old version's folder serves nobody, and its links keep the old
// files' space. Folders of keep's version stay (containers may have one
// mounted).
func PruneFolders(keep string) error {
	store := filepath.Dir(keep)
	entries, err := os.ReadDir(store)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("driver folders: %w", err)
	}
	version, _, _ := cutLast(filepath.Base(keep), "-")
	var errs []error
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == filepath.Base(keep) || !e.IsDir():
			continue
		case strings.HasPrefix(name, tmpPrefix):
			if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < time.Hour {
				continue
			}
		default:
			if v, _, _ := cutLast(name, "-"); v == version {
				continue
			}
		}
		if err := os.RemoveAll(filepath.Join(store, name)); err != nil {
			errs = append(errs, fmt.Errorf("driver folders: %w", err))
		}
	}
	return errors.Join(errs...)
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
