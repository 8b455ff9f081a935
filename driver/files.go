package driver

import (
	"fmt"
	"path"

	"tags.cncf.io/container-device-interface/specs-go"
)

// Files is what a container needs from the driver, beyond the nodes of the
// devices it is given.
type Files struct {
	// Version is the driver version the libraries match.
	Version string
	// ControlNodes are /dev/nvidiactl, /dev/nvidia-uvm, … present on the host.
	ControlNodes []*specs.DeviceNode
	// Mounts are the libraries, binaries, firmware and sockets, each at the
	// same path in the container as under the driver root.
	Mounts []*specs.Mount
	// Links are the symbolic links the hook creates in the container, as
	// "target::link" with the link's absolute path (SONAME and .so links).
	Links []string
	// LibDirs are the container folders holding the driver's libraries.
	LibDirs []string
	// Libraries are the container paths the linker cache must map each
	// library's SONAME to: the SONAME link, or the file when the SONAME is
	// the file's own name.
	Libraries []string

	nodes nodeSource
}

// nodeSource finds device nodes: on a host by stat, on a simulated host
// from the standard numbering.
type nodeSource interface {
	node(path string) (*specs.DeviceNode, error)
	capMinor(gpuMinor, gi, ci int) (int, error)
}

// GPUNode returns the node of the GPU with the given minor, /dev/nvidiaN.
func (f *Files) GPUNode(minor int) (*specs.DeviceNode, error) {
	return f.nodes.node(fmt.Sprintf("/dev/nvidia%d", minor))
}

// MIGNodes returns the capability nodes that give access to a MIG device:
// its GPU instance's and its compute instance's access nodes.
func (f *Files) MIGNodes(gpuMinor, gi, ci int) ([]*specs.DeviceNode, error) {
	var out []*specs.DeviceNode
	for _, c := range []int{-1, ci} {
		minor, err := f.nodes.capMinor(gpuMinor, gi, c)
		if err != nil {
			return nil, err
		}
		n, err := f.nodes.node(fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// library is a driver library as the standard layout knows it: its base
// name and the SONAME the driver gives it ("" when the SONAME is the file
// name itself, as for libnvidia-gpucomp).
type library struct {
	base   string
	soname string
	// devLink adds base.so -> SONAME, which some applications dlopen.
	devLink  bool
	required bool
}

// libraries are the compute and utility libraries a CUDA container needs.
var libraries = []library{
	{base: "libcuda", soname: "libcuda.so.1", devLink: true, required: true},
	{base: "libcudadebugger", soname: "libcudadebugger.so.1"},
	{base: "libnvidia-ml", soname: "libnvidia-ml.so.1", required: true},
	{base: "libnvidia-ptxjitcompiler", soname: "libnvidia-ptxjitcompiler.so.1"},
	{base: "libnvidia-nvvm", soname: "libnvidia-nvvm.so.4"},
	{base: "libnvidia-opencl", soname: "libnvidia-opencl.so.1"},
	{base: "libnvidia-gpucomp"},
	{base: "libnvidia-allocator", soname: "libnvidia-allocator.so.1"},
	{base: "libnvidia-cfg", soname: "libnvidia-cfg.so.1"},
	{base: "libnvidia-opticalflow", soname: "libnvidia-opticalflow.so.1"},
	{base: "libnvcuvid", soname: "libnvcuvid.so.1"},
	{base: "libnvidia-encode", soname: "libnvidia-encode.so.1"},
}

// binaries are the driver's programs a container may run.
var binaries = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}

// sockets are the driver daemons' sockets a container may talk to.
var sockets = []string{"/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket"}

// Mount options, by kind of mount (tests/mounts_test.go checks each from
// inside a container). Every mount is read-only, so a container cannot
// change the host's driver (nor every other container's); nosuid, so a
// setuid bit on a host file gives no privilege inside; nodev, so devices
// reach a container only as the spec's device nodes, which the runtime
// also allows in the device cgroup.
var (
	// fileOptions are the libraries' and programs' mounts. They must stay
	// executable: execve needs it of a program, and the dynamic loader
	// maps a library's code with mmap(PROT_EXEC), which a noexec mount
	// refuses (EPERM). A file has no submounts: bind, not rbind.
	fileOptions = []string{"ro", "nosuid", "nodev", "bind"}
	// firmwareOptions are the GSP firmware's: data, never run.
	firmwareOptions = []string{"ro", "nosuid", "nodev", "noexec", "bind"}
	// socketOptions are the driver daemons' sockets'. Read-only does not
	// stop clients: connect(2) checks write permission on the socket's
	// inode, and the kernel refuses writes on a read-only mount only to
	// regular files, folders and links.
	socketOptions = []string{"ro", "nosuid", "nodev", "noexec", "bind"}
	// folderOptions are for a folder mount: rbind takes the folder's
	// submounts along (a bind alone would show the empty mount points
	// under them), and rprivate keeps mounts made later under the host's
	// folder from propagating into running containers, and the container's
	// from reaching the host.
	folderOptions = []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
)

// addLibrary records a library file found at containerPath (hostPath on
// the host), with the links its SONAME and .so name need.
func (f *Files) addLibrary(l library, hostPath, containerPath, soname string) {
	f.Mounts = append(f.Mounts, &specs.Mount{HostPath: hostPath, ContainerPath: containerPath, Options: fileOptions})
	dir, file := path.Split(containerPath)
	dir = path.Clean(dir)
	if soname == "" {
		soname = file
	}
	f.Libraries = append(f.Libraries, path.Join(dir, soname))
	if soname != file {
		f.Links = append(f.Links, file+"::"+path.Join(dir, soname))
		if l.devLink {
			f.Links = append(f.Links, soname+"::"+path.Join(dir, l.base+".so"))
			f.Libraries = append(f.Libraries, path.Join(dir, l.base+".so"))
		}
	}
	for _, d := range f.LibDirs {
		if d == dir {
			return
		}
	}
	f.LibDirs = append(f.LibDirs, dir)
}
