package containerexit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// The node-wide calls: what a watcher of every pod on the node needs (see runtimewatch).

// ErrNoEvents reports a runtime that does not serve the CRI container event stream
// (containerd before 1.7 answers Unimplemented).
var ErrNoEvents = errors.New("the runtime does not serve the CRI container event stream")

// RuntimeVersion names the runtime behind the endpoint.
type RuntimeVersion struct {
	// Name is the runtime's name, for example "containerd" or "cri-o".
	Name string
	// Version is its version as it reports it, for example "v2.2.9" or "1.6.20~ds1".
	Version string
}

// Major returns the runtime's major version, or -1 when it cannot be read.
func (v RuntimeVersion) Major() int {
	s := strings.TrimPrefix(v.Version, "v")
	if i := strings.IndexAny(s, ".-~+"); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func (v RuntimeVersion) String() string { return v.Name + " " + v.Version }

// Version asks the runtime for its name and version.
func (c *CRI) Version(ctx context.Context) (RuntimeVersion, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return RuntimeVersion{}, fmt.Errorf("runtime version: %w", err)
	}
	return RuntimeVersion{Name: resp.GetRuntimeName(), Version: resp.GetRuntimeVersion()}, nil
}

// ListAll lists every container the kubelet made on the node with one ListContainers call.
// Containers without the kubelet's pod UID label (not made by a kubelet) are left out.
func (c *CRI) ListAll(ctx context.Context) ([]Container, error) {
	ctx, cancel := context.WithTimeout(ctx, c.listTimeout)
	defer cancel()
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	out := make([]Container, 0, len(resp.GetContainers()))
	for _, rc := range resp.GetContainers() {
		if rc.GetLabels()[kubelettypes.KubernetesPodUIDLabel] == "" {
			continue
		}
		out = append(out, fromListed(rc))
	}
	return out, nil
}

// EventKind is what happened to a container.
type EventKind int

// Event kinds, as the CRI names them.
const (
	EventCreated EventKind = iota
	EventStarted
	EventStopped
	EventDeleted
)

func (k EventKind) String() string {
	switch k {
	case EventCreated:
		return "created"
	case EventStarted:
		return "started"
	case EventStopped:
		return "stopped"
	}
	return "deleted"
}

// Event is one container event from the runtime.
type Event struct {
	Kind EventKind
	// ContainerID is the container the event is about.
	ContainerID string
	// PodUID is the pod the container belongs to, from the event's sandbox status; empty
	// when the runtime did not say.
	PodUID string
	// Containers are the statuses of the pod's containers the runtime sent with the event
	// (containerd sends every container of the sandbox), possibly none.
	Containers []Container
}

// Events streams the runtime's container events to fn, in order, until ctx ends (nil) or the
// stream fails (the error). A runtime without the stream yields ErrNoEvents at once. fn runs
// on the caller's goroutine and must return quickly: the runtime queues events meanwhile.
// The runtime sends no headers before its first event, so a caller cannot know when the
// subscription is in place; it relists a little later to close that gap.
func (c *CRI) Events(ctx context.Context, fn func(Event)) error {
	stream, err := c.rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return eventsError(ctx, err)
	}
	// A runtime without the stream answers Unimplemented on the first receive.
	for {
		ev, err := stream.Recv()
		if err != nil {
			return eventsError(ctx, err)
		}
		out := Event{ContainerID: ev.GetContainerId(), PodUID: ev.GetPodSandboxStatus().GetMetadata().GetUid()}
		switch ev.GetContainerEventType() {
		case runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT:
			out.Kind = EventCreated
		case runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT:
			out.Kind = EventStarted
		case runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT:
			out.Kind = EventStopped
		default:
			out.Kind = EventDeleted
		}
		for _, st := range ev.GetContainersStatuses() {
			if st.GetLabels()[kubelettypes.KubernetesPodUIDLabel] == "" {
				continue
			}
			out.Containers = append(out.Containers, fromStatus(st))
		}
		fn(out)
	}
}

func eventsError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return nil
	case status.Code(err) == codes.Unimplemented:
		return fmt.Errorf("%w: %v", ErrNoEvents, err)
	case errors.Is(err, io.EOF):
		return errors.New("container event stream: the runtime closed it")
	}
	return fmt.Errorf("container event stream: %w", err)
}

// DefaultEndpoints are the CRI sockets looked for, in order, when the node plugin is not
// given one: containerd's and CRI-O's usual places.
var DefaultEndpoints = []string{
	"unix:///run/containerd/containerd.sock",
	"unix:///run/crio/crio.sock",
	"unix:///var/run/crio/crio.sock",
}

// Detect returns the first of endpoints whose socket exists, or "" when none does.
func Detect(endpoints []string) string {
	for _, ep := range endpoints {
		path, ok := strings.CutPrefix(ep, "unix://")
		if !ok {
			continue
		}
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return ep
		}
	}
	return ""
}
