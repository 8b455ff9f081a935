package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pb "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Probe checks the plugin's sockets in kubeletDir (the container's
// liveness and readiness probes): each must answer GetDevicePluginOptions
// within timeout, so a plugin that hangs is restarted. With ready, at
// least one must be there: a resource is being served. A socket left by a
// plugin that died fails too; a new plugin replaces it when it serves.
func Probe(ctx context.Context, kubeletDir string, ready bool, timeout time.Duration) error {
	socks, err := filepath.Glob(filepath.Join(kubeletDir, socketName("*")))
	if err != nil {
		return fmt.Errorf("device plugin sockets in %s: %w", kubeletDir, err)
	}
	if ready && len(socks) == 0 {
		return fmt.Errorf("no device plugin socket in %s: no resource is served yet", kubeletDir)
	}
	var errs []error
	for _, sock := range socks {
		if err := probeSocket(ctx, sock, timeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func probeSocket(ctx context.Context, sock string, timeout time.Duration) error {
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("device plugin socket %s: %w", sock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := pb.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx, &pb.Empty{}, grpc.WaitForReady(true)); err != nil {
		return fmt.Errorf("device plugin socket %s does not answer: %w", sock, err)
	}
	return nil
}
