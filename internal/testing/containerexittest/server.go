// Package containerexittest serves a fake CRI RuntimeService over real gRPC on a unix
// socket, so tests exercise the same client, label filter and errors as the node plugin does
// against containerd, without a runtime on the machine. (cri-api's own fake,
// k8s.io/cri-api/pkg/apis/testing, is not a gRPC server and would pull testify into go.mod.)
package containerexittest

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// Container describes one fake container of a pod.
type Container struct {
	ID, PodUID, Name string
	Attempt          uint32
	State            runtimeapi.ContainerState
	ExitCode         int32
}

// Server is a fake CRI runtime service: ListContainers (honouring the label selector),
// ContainerStatus, Version and, once enabled, GetContainerEvents. Its containers are changed with Set, SetState and Remove while clients
// poll it.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	// Endpoint is the unix:// address to dial.
	Endpoint string

	mu         sync.Mutex
	containers map[string]*runtimeapi.ContainerStatus
	calls      []string
	podLists   map[string]int // ListContainers calls filtered on a pod UID, by UID
	failList   error
	// version answers Version; events enables GetContainerEvents (off: Unimplemented, as
	// containerd 1.6 answers); subs are the open streams.
	version runtimeapi.VersionResponse
	events  bool
	subs    map[chan *runtimeapi.ContainerEventResponse]struct{}
}

// SetVersion sets the runtime name and version that Version answers.
func (s *Server) SetVersion(name, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version = runtimeapi.VersionResponse{RuntimeName: name, RuntimeVersion: version}
}

// EnableEvents makes GetContainerEvents stream an event for every later Set, SetState and
// Remove, with the statuses of the pod's containers, as containerd 2.x does.
func (s *Server) EnableEvents() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = true
}

// Subscribers returns the number of open event streams.
func (s *Server) Subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

// CloseStreams ends every open event stream with an error, as a restarting runtime does.
func (s *Server) CloseStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		close(ch)
		delete(s.subs, ch)
	}
}

// Version answers the name and version set with SetVersion.
func (s *Server) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "Version")
	return &runtimeapi.VersionResponse{RuntimeName: s.version.RuntimeName, RuntimeVersion: s.version.RuntimeVersion}, nil
}

// GetContainerEvents streams events until the client goes or CloseStreams; Unimplemented
// unless EnableEvents was called.
func (s *Server) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	s.mu.Lock()
	s.calls = append(s.calls, "GetContainerEvents")
	if !s.events {
		s.mu.Unlock()
		return status.Error(codes.Unimplemented, "GetContainerEvents is not implemented")
	}
	ch := make(chan *runtimeapi.ContainerEventResponse, 1024)
	if s.subs == nil {
		s.subs = map[chan *runtimeapi.ContainerEventResponse]struct{}{}
	}
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return status.Error(codes.Unavailable, "runtime restarting")
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// publishLocked sends an event about container id to every stream.
func (s *Server) publishLocked(id, podUID string, typ runtimeapi.ContainerEventType, gone *runtimeapi.ContainerStatus) {
	if !s.events {
		return
	}
	ev := newEvent(id, podUID, typ)
	for _, c := range s.containers {
		if c.Labels[kubelettypes.KubernetesPodUIDLabel] == podUID {
			ev.ContainersStatuses = append(ev.ContainersStatuses, cloneStatus(c))
		}
	}
	if gone != nil {
		ev.ContainersStatuses = append(ev.ContainersStatuses, cloneStatus(gone))
	}
	s.sendLocked(ev)
}

// newEvent is an event about container id of pod podUID, without container statuses.
func newEvent(id, podUID string, typ runtimeapi.ContainerEventType) *runtimeapi.ContainerEventResponse {
	return &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: time.Now().UnixNano(),
		PodSandboxStatus: &runtimeapi.PodSandboxStatus{Metadata: &runtimeapi.PodSandboxMetadata{Uid: podUID}}}
}

// sendLocked sends ev to every stream.
func (s *Server) sendLocked(ev *runtimeapi.ContainerEventResponse) {
	for ch := range s.subs {
		select {
		case ch <- ev:
		default: // a stuck client loses events, like a runtime's full queue
		}
	}
}

func cloneStatus(c *runtimeapi.ContainerStatus) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{Id: c.Id, Metadata: c.Metadata, State: c.State, ExitCode: c.ExitCode,
		CreatedAt: c.CreatedAt, Labels: maps.Clone(c.Labels)}
}

func eventType(state runtimeapi.ContainerState) runtimeapi.ContainerEventType {
	switch state {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	}
	return runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
}

// NewServer serves an empty fake runtime until the test ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	// A short directory: a unix socket path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "cri.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Endpoint: "unix://" + path, containers: map[string]*runtimeapi.ContainerStatus{}}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, s)
	served := make(chan struct{})
	go func() { // owned by the test: Cleanup stops it and waits
		defer close(served)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return s
}

// ListContainers returns the containers whose labels match the filter's label selector.
func (s *Server) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "ListContainers")
	if uid := req.GetFilter().GetLabelSelector()[kubelettypes.KubernetesPodUIDLabel]; uid != "" {
		if s.podLists == nil {
			s.podLists = map[string]int{}
		}
		s.podLists[uid]++
	}
	if s.failList != nil {
		return nil, s.failList
	}
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range s.containers {
		match := true
		for k, v := range req.GetFilter().GetLabelSelector() {
			if c.Labels[k] != v {
				match = false
			}
		}
		if match {
			resp.Containers = append(resp.Containers, &runtimeapi.Container{
				Id: c.Id, Metadata: c.Metadata, State: c.State, CreatedAt: c.CreatedAt, Labels: maps.Clone(c.Labels),
			})
		}
	}
	return resp, nil
}

// ContainerStatus returns one container's status, NotFound for an unknown ID.
func (s *Server) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "ContainerStatus")
	c := s.containers[req.GetContainerId()]
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "container %q not found", req.GetContainerId())
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: c.Id, Metadata: c.Metadata, State: c.State, ExitCode: c.ExitCode, CreatedAt: c.CreatedAt, Labels: maps.Clone(c.Labels),
	}}, nil
}

// Set adds or replaces containers, labelled as the kubelet labels them.
func (s *Server) Set(cs ...Container) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		s.containers[c.ID] = &runtimeapi.ContainerStatus{
			Id:        c.ID,
			Metadata:  &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: c.Attempt},
			State:     c.State,
			ExitCode:  c.ExitCode,
			CreatedAt: time.Now().UnixNano(),
			Labels: map[string]string{
				kubelettypes.KubernetesPodUIDLabel:        c.PodUID,
				kubelettypes.KubernetesContainerNameLabel: c.Name,
			},
		}
		s.publishLocked(c.ID, c.PodUID, eventType(c.State), nil)
	}
}

// SetState changes a container's state (and exit code, for CONTAINER_EXITED).
func (s *Server) SetState(id string, state runtimeapi.ContainerState, exitCode int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[id]; c != nil {
		c.State, c.ExitCode = state, exitCode
		s.publishLocked(id, c.Labels[kubelettypes.KubernetesPodUIDLabel], eventType(state), nil)
	}
}

// SetStateWithoutStatuses changes a container's state (and exit code, for
// CONTAINER_EXITED) with an event that carries no container statuses, as containerd sends
// one when it cannot read them; the event still names the container and its pod.
func (s *Server) SetStateWithoutStatuses(id string, state runtimeapi.ContainerState, exitCode int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[id]; c != nil {
		c.State, c.ExitCode = state, exitCode
		if s.events {
			s.sendLocked(newEvent(id, c.Labels[kubelettypes.KubernetesPodUIDLabel], eventType(state)))
		}
	}
}

// SetStateQuiet changes a container's state without an event, as a stale listing would
// show it.
func (s *Server) SetStateQuiet(id string, state runtimeapi.ContainerState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.containers[id]; c != nil {
		c.State = state
	}
}

// Remove deletes containers, as the kubelet's garbage collector does.
func (s *Server) Remove(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if c := s.containers[id]; c != nil {
			delete(s.containers, id)
			s.publishLocked(id, c.Labels[kubelettypes.KubernetesPodUIDLabel], runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, c)
		}
	}
}

// FailList makes every ListContainers call fail with err (nil: succeed again).
func (s *Server) FailList(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failList = err
}

// Calls returns how many times method (for example "ListContainers") was called.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if c == method {
			n++
		}
	}
	return n
}

// PodListings returns how many ListContainers calls were filtered on podUID (one pod's
// containers, not the node's).
func (s *Server) PodListings(podUID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.podLists[podUID]
}

// Called returns a copy of every call so far, in order.
func (s *Server) Called() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}
