// Command criclient runs one container in a pod sandbox through a CRI
// runtime service, as the kubelet would, and prints the container's log.
// It stands in for crictl, which the Go module proxy refuses to serve, in
// gpuctk's end-to-end tests; mk/runtime.mk builds it into .cache/tools.
//
//	criclient -socket S -handler nvidia -image IMG [-env K=V] [-annotation K=V] -- /bin/sh -c '...'
//
// The sandbox uses the host's network, so no CNI plugin is needed. It
// exits 0 when the container did, 1 otherwise.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type envFlag []string

func (e *envFlag) String() string     { return strings.Join(*e, ",") }
func (e *envFlag) Set(v string) error { *e = append(*e, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "criclient:", err)
		os.Exit(1)
	}
}

func run() error {
	socket := flag.String("socket", "", "containerd's socket")
	handler := flag.String("handler", "", "runtime handler (runtime class)")
	image := flag.String("image", "", "image of the container")
	logDir := flag.String("log-dir", os.TempDir(), "folder for the container's log")
	var env, annotations envFlag
	flag.Var(&env, "env", "K=V for the container, repeatable")
	flag.Var(&annotations, "annotation", "K=V annotation of the container, repeatable")
	flag.Parse()
	if *socket == "" || *image == "" || flag.NArg() == 0 {
		return fmt.Errorf("usage: criclient -socket S [-handler H] -image IMG [-env K=V]... -- COMMAND...")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rs := cri.NewRuntimeServiceClient(conn)

	uid := fmt.Sprintf("gpuctk-%d", time.Now().UnixNano())
	sandboxConfig := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: "gpuctk", Namespace: "default", Uid: uid},
		LogDirectory: *logDir,
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE},
		}},
	}
	sb, err := rs.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sandboxConfig, RuntimeHandler: *handler})
	if err != nil {
		return fmt.Errorf("run pod sandbox: %w", err)
	}
	defer func() {
		rs.StopPodSandbox(context.Background(), &cri.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})
		rs.RemovePodSandbox(context.Background(), &cri.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
	}()
	var envs []*cri.KeyValue
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envs = append(envs, &cri.KeyValue{Key: k, Value: []byte(v)})
	}
	anns := map[string]string{}
	for _, kv := range annotations {
		k, v, _ := strings.Cut(kv, "=")
		anns[k] = v
	}
	ctr, err := rs.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId:  sb.PodSandboxId,
		SandboxConfig: sandboxConfig,
		Config: &cri.ContainerConfig{
			Metadata:    &cri.ContainerMetadata{Name: "work"},
			Image:       &cri.ImageSpec{Image: *image},
			Command:     flag.Args(),
			Envs:        envs,
			Annotations: anns,
			LogPath:     "work.log",
		},
	})
	if err != nil {
		return fmt.Errorf("create container: %w", err)
	}
	if _, err := rs.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		return fmt.Errorf("start container: %w", err)
	}
	for {
		st, err := rs.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: ctr.ContainerId})
		if err != nil {
			return fmt.Errorf("container status: %w", err)
		}
		if st.Status.State == cri.ContainerState_CONTAINER_EXITED {
			log, _ := os.ReadFile(filepath.Join(*logDir, "work.log"))
			// CRI log lines: TIME STREAM TAG MESSAGE.
			for _, l := range strings.Split(strings.TrimRight(string(log), "\n"), "\n") {
				if f := strings.SplitN(l, " ", 4); len(f) == 4 {
					fmt.Println(f[3])
				}
			}
			rs.RemoveContainer(context.Background(), &cri.RemoveContainerRequest{ContainerId: ctr.ContainerId})
			if st.Status.ExitCode != 0 {
				return fmt.Errorf("container exited %d: %s", st.Status.ExitCode, st.Status.Message)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container did not exit: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
