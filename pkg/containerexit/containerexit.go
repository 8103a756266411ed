// Package containerexit asks the node's container runtime (CRI) whether containers have
// exited. The node plugin needs it for one case only: a pod with a legacy sidecar that is
// being deleted. The kubelet then stops the app and the sidecar together and publishes no
// container status until every container has stopped, so the API never says that the app
// is done while the sidecar is still serving it; the runtime on the same node does.
package containerexit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Checker reports whether a container has exited.
type Checker interface {
	Exited(ctx context.Context, containerID string) (bool, error)
}

var _ Checker = (*CRI)(nil)

// CRI is a Checker backed by a CRI runtime endpoint (containerd, CRI-O).
type CRI struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

// Dial connects to a CRI endpoint such as unix:///run/containerd/containerd.sock. The
// connection is lazy: a runtime that is not up yet is retried on use.
func Dial(endpoint string) (*CRI, error) {
	if !strings.HasPrefix(endpoint, "unix://") {
		return nil, fmt.Errorf("runtime endpoint %q: only unix:// endpoints are supported", endpoint)
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("runtime endpoint %q: %w", endpoint, err)
	}
	return &CRI{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

// Close releases the connection.
func (c *CRI) Close() error { return c.conn.Close() }

// Exited reports whether the container has exited or no longer exists. containerID may
// carry the "<runtime>://" prefix of a pod's container status.
func (c *CRI) Exited(ctx context.Context, containerID string) (bool, error) {
	id := StripScheme(containerID)
	if id == "" {
		return false, fmt.Errorf("empty container ID")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if status.Code(err) == codes.NotFound {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("container %s status: %w", id, err)
	}
	return resp.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED, nil
}

// StripScheme turns "containerd://abc" into "abc".
func StripScheme(id string) string {
	if _, rest, ok := strings.Cut(id, "://"); ok {
		return rest
	}
	return id
}
