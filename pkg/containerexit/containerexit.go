// Package containerexit asks the node's container runtime (CRI) which containers of a pod
// exist and whether they still run. The node plugin needs it when a pod is being stopped
// (deleted, evicted, past its activeDeadlineSeconds, on a shutting-down node): the kubelet
// then stops the pod's containers and publishes no container status until every container,
// the gcsfuse sidecar included, has stopped. So the API never says that the containers that
// use the mounts are gone while the sidecar still serves them; the runtime on the same node
// does, and it also knows the containers whose IDs never reached the API.
package containerexit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// CallTimeout bounds one runtime call. The runtime is local: a call that takes longer is
// stuck, and the caller's next poll is a better retry than waiting.
const CallTimeout = 2 * time.Second

// State is a container's state as the runtime reports it.
type State int

// States, in the CRI's order.
const (
	// StateCreated: created but not started yet. The kubelet starts it right after, so it
	// counts as a container that may use the mounts.
	StateCreated State = iota
	StateRunning
	StateExited
	// StateUnknown: the runtime cannot tell (for example its shim is gone).
	StateUnknown
)

func (s State) String() string {
	switch s {
	case StateCreated:
		return "created"
	case StateRunning:
		return "running"
	case StateExited:
		return "exited"
	}
	return "unknown"
}

// Active reports whether a container in state s may still use the pod's volumes: everything
// but exited, so that a container between create and start, or one the runtime lost track
// of, is never taken for gone.
func (s State) Active() bool { return s != StateExited }

// Container is one container of a pod as the runtime lists it.
type Container struct {
	// ID is the runtime's container ID (without the "<runtime>://" prefix of the API).
	ID string
	// PodUID is the kubelet's pod UID label: the pod the container belongs to.
	PodUID string
	// Name is the pod spec's container name (the kubelet's io.kubernetes.container.name label).
	Name string
	// Attempt counts the kubelet's restarts of that container, from 0.
	Attempt uint32
	State   State
	// CreatedAt orders containers of the same name when attempts tie.
	CreatedAt time.Time
	// ExitCode is the exit code of an exited container when ExitKnown: a listing does not
	// carry it, a status or an event does.
	ExitCode  int32
	ExitKnown bool
	// FinishedAt is when an exited container exited, when a status or an event said.
	FinishedAt time.Time
}

// Runtime is what the node plugin needs from the container runtime.
type Runtime interface {
	// PodContainers lists every container of the pod with podUID, in any order, with one
	// runtime call. A pod the runtime does not know yields an empty list and no error.
	PodContainers(ctx context.Context, podUID string) ([]Container, error)
	// Status returns one container's state; for an exited container also its exit code
	// and finish time. The listing does not carry those, so this costs one more call;
	// callers ask only when they need them.
	Status(ctx context.Context, containerID string) (Container, error)
}

var _ Runtime = (*CRI)(nil)

// MaxMessageSize bounds a runtime's answer, as the kubelet's own CRI client does (16 MiB):
// a node-wide listing over thousands of kept containers passes gRPC's default 4 MiB.
const MaxMessageSize = 16 << 20

// CRI is a Runtime backed by a CRI runtime endpoint (containerd, CRI-O).
type CRI struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
	// listTimeout bounds ListAll: CallTimeout, so that a slow node-wide listing fails fast
	// and the runtime watch falls back to per-pod calls; a test of a large answer under the
	// race detector raises it (export_test.go).
	listTimeout time.Duration
}

// Dial connects to a CRI endpoint such as unix:///run/containerd/containerd.sock. The
// connection is lazy: a runtime that is not up yet is retried on use.
func Dial(endpoint string) (*CRI, error) {
	if !strings.HasPrefix(endpoint, "unix://") {
		return nil, fmt.Errorf("runtime endpoint %q: only unix:// endpoints are supported", endpoint)
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("runtime endpoint %q: %w", endpoint, err)
	}
	return &CRI{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn), listTimeout: CallTimeout}, nil
}

// Close releases the connection.
func (c *CRI) Close() error { return c.conn.Close() }

// PodContainers lists the pod's containers with one ListContainers call filtered, by the
// runtime, on the kubelet's pod UID label.
func (c *CRI) PodContainers(ctx context.Context, podUID string) ([]Container, error) {
	if podUID == "" {
		return nil, errors.New("list pod containers: empty pod UID")
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{kubelettypes.KubernetesPodUIDLabel: podUID},
	}})
	if err != nil {
		return nil, fmt.Errorf("list containers of pod %s: %w", podUID, err)
	}
	out := make([]Container, 0, len(resp.GetContainers()))
	for _, rc := range resp.GetContainers() {
		if rc.GetLabels()[kubelettypes.KubernetesPodUIDLabel] != podUID {
			continue // a runtime that ignored the filter must not mix pods up
		}
		out = append(out, fromListed(rc))
	}
	return out, nil
}

// Status asks ContainerStatus for one container, with its exit code and finish time when
// it has exited.
func (c *CRI) Status(ctx context.Context, containerID string) (Container, error) {
	if containerID == "" {
		return Container{}, errors.New("container status: empty container ID")
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: containerID})
	if err != nil {
		return Container{}, fmt.Errorf("container %s status: %w", containerID, err)
	}
	return fromStatus(resp.GetStatus()), nil
}

// fromListed converts a listed container; a container without the kubelet's labels (not
// made by a kubelet) gets an empty PodUID.
func fromListed(rc *runtimeapi.Container) Container {
	name := rc.GetLabels()[kubelettypes.KubernetesContainerNameLabel]
	if name == "" {
		name = rc.GetMetadata().GetName()
	}
	return Container{
		ID:        rc.GetId(),
		PodUID:    rc.GetLabels()[kubelettypes.KubernetesPodUIDLabel],
		Name:      name,
		Attempt:   rc.GetMetadata().GetAttempt(),
		State:     fromCRI(rc.GetState()),
		CreatedAt: time.Unix(0, rc.GetCreatedAt()),
	}
}

// fromStatus converts a container status (ContainerStatus, or one carried by an event),
// which has the exit code of an exited container.
func fromStatus(st *runtimeapi.ContainerStatus) Container {
	c := fromListed(&runtimeapi.Container{Id: st.GetId(), Metadata: st.GetMetadata(), State: st.GetState(),
		CreatedAt: st.GetCreatedAt(), Labels: st.GetLabels()})
	if c.State == StateExited {
		c.ExitCode, c.ExitKnown = st.GetExitCode(), true
		if f := st.GetFinishedAt(); f > 0 {
			c.FinishedAt = time.Unix(0, f)
		}
	}
	return c
}

func fromCRI(s runtimeapi.ContainerState) State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return StateExited
	}
	return StateUnknown
}
