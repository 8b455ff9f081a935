package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pb "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuctk/gpuctk/internal/atomicfile"
	"github.com/gpuctk/gpuctk/offer"
)

// server is the device plugin of one resource.
type server struct {
	pb.UnimplementedDevicePluginServer
	socket string
	log    *slog.Logger

	mu    sync.Mutex
	state *State
	res   *offer.Resource
	// unhealthy holds the IDs last found unhealthy.
	unhealthy map[string]bool
	// changed is closed and replaced when what ListAndWatch sends changes.
	changed chan struct{}
	stopped chan struct{}
	// watchers counts the open ListAndWatch streams; registered is when
	// the kubelet last took the registration (zero: not registered).
	// lost is sent to, without blocking, when a stream ends other than
	// by stop: the kubelet dropped its watch (see Plugin.checkWatched).
	watchers   int
	registered time.Time
	lost       chan<- struct{}

	grpc *grpc.Server
}

// SocketPattern matches the sockets of every resource in the kubelet's
// device-plugins folder (filepath.Match syntax): how the DRA driver tells
// that the device plugin serves the node's GPUs.
const SocketPattern = "gpuctk-*.sock"

// socketName is the plugin's socket in the kubelet dir for a resource:
// gpuctk-nvidia.com_gpu.sock.
func socketName(resource string) string {
	return "gpuctk-" + strings.ReplaceAll(resource, "/", "_") + ".sock"
}

func newServer(dir string, st *State, r *offer.Resource, log *slog.Logger, lost chan<- struct{}) *server {
	return &server{
		socket: filepath.Join(dir, socketName(r.Name)),
		log:    log.With("resource", r.Name),
		state:  st, res: r,
		changed: make(chan struct{}), stopped: make(chan struct{}),
		lost: lost,
	}
}

// start serves the socket. It is bound at a temporary name and moved
// into place: a stale socket of an earlier run, or a FIFO, a link or a
// folder that appeared there, is replaced in one step, never followed.
func (s *server) start() error {
	tmp := filepath.Join(filepath.Dir(s.socket), fmt.Sprintf(".gpuctk-%08x", rand.Uint32()))
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return fmt.Errorf("device plugin socket: %w", err)
	}
	// The socket's file stays where it was moved to: the listener's
	// close must not remove tmp's name, which another may hold by then.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	was, err := atomicfile.Place(tmp, s.socket)
	if err != nil {
		l.Close()
		os.Remove(tmp)
		return fmt.Errorf("device plugin socket %s: %w", s.socket, err)
	}
	if was != "" && was != "a socket" {
		s.log.Warn("the plugin's socket path held "+was+": replaced by the socket", "socket", s.socket)
	}
	s.grpc = grpc.NewServer()
	pb.RegisterDevicePluginServer(s.grpc, s)
	go func() {
		if err := s.grpc.Serve(l); err != nil {
			s.log.Error("serving stopped", "err", err)
		}
	}()
	return nil
}

// register tells the kubelet at kubeletSock about the resource.
func (s *server) register(ctx context.Context, kubeletSock string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("kubelet socket %s: %w", kubeletSock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s.mu.Lock()
	name := s.res.Name
	s.mu.Unlock()
	_, err = pb.NewRegistrationClient(conn).Register(ctx, &pb.RegisterRequest{
		Version:      pb.Version,
		Endpoint:     filepath.Base(s.socket),
		ResourceName: name,
		Options:      options(),
	})
	if err != nil {
		return fmt.Errorf("register %s with the kubelet at %s: %w", name, kubeletSock, err)
	}
	return nil
}

// devices is how many devices the server advertises.
func (s *server) devices() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.res.Devices)
}

// stop ends every stream and removes the socket.
func (s *server) stop() {
	s.mu.Lock()
	select {
	case <-s.stopped:
	default:
		close(s.stopped)
	}
	s.mu.Unlock()
	if s.grpc != nil {
		s.grpc.Stop()
	}
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("removing socket", "err", err)
	}
}

// update swaps in a new resolution of the resource and its health.
func (s *server) update(st *State, r *offer.Resource, unhealthy map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.res, s.unhealthy = st, r, unhealthy
	close(s.changed)
	s.changed = make(chan struct{})
}

func options() *pb.DevicePluginOptions {
	return &pb.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

func (s *server) GetDevicePluginOptions(context.Context, *pb.Empty) (*pb.DevicePluginOptions, error) {
	return options(), nil
}

// setRegistered records that the kubelet took the registration now.
func (s *server) setRegistered(at time.Time) {
	s.mu.Lock()
	s.registered = at
	s.mu.Unlock()
}

// watched says whether a ListAndWatch stream is open, and when the
// kubelet last took the registration.
func (s *server) watched() (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchers > 0, s.registered
}

func (s *server) ListAndWatch(_ *pb.Empty, stream pb.DevicePlugin_ListAndWatchServer) error {
	s.mu.Lock()
	s.watchers++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.watchers--
		s.mu.Unlock()
		select {
		case <-s.stopped:
		default:
			if s.lost != nil {
				select {
				case s.lost <- struct{}{}:
				default:
				}
			}
		}
	}()
	for {
		s.mu.Lock()
		devs := make([]*pb.Device, len(s.res.Devices))
		for i, d := range s.res.Devices {
			h := pb.Healthy
			if s.unhealthy[d.Name()] {
				h = pb.Unhealthy
			}
			devs[i] = &pb.Device{ID: d.Name(), Health: h}
			// The GPU's NUMA node, for the kubelet's Topology Manager.
			if n := d.GPU.NUMANode; n != nil {
				devs[i].Topology = &pb.TopologyInfo{Nodes: []*pb.NUMANode{{ID: int64(*n)}}}
			}
		}
		changed := s.changed
		s.mu.Unlock()
		if err := stream.Send(&pb.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.stopped:
			return nil
		case <-stream.Context().Done():
			return nil
		}
	}
}

func (s *server) Allocate(_ context.Context, req *pb.AllocateRequest) (*pb.AllocateResponse, error) {
	s.mu.Lock()
	st, r := s.state, s.res
	s.mu.Unlock()
	resp, err := allocate(r, st.Kind, st.Kubernetes.DeviceListStrategy, st.Capabilities, req)
	if err != nil {
		s.log.Warn("allocate refused", "err", err)
	}
	return resp, err
}

func (s *server) GetPreferredAllocation(_ context.Context, req *pb.PreferredAllocationRequest) (*pb.PreferredAllocationResponse, error) {
	s.mu.Lock()
	st, r := s.state, s.res
	s.mu.Unlock()
	resp := &pb.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids := preferred(r, st.Kubernetes.AllocationPolicy, c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		resp.ContainerResponses = append(resp.ContainerResponses, &pb.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (s *server) PreStartContainer(context.Context, *pb.PreStartContainerRequest) (*pb.PreStartContainerResponse, error) {
	return &pb.PreStartContainerResponse{}, nil
}
