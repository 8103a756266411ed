package containerexit_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/containerexittest"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
)

func dial(t *testing.T, srv *containerexittest.Server) *containerexit.CRI {
	t.Helper()
	c, err := containerexit.Dial(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// One ListContainers call returns exactly the pod's containers, named by the kubelet's
// label, with their states, whatever else runs on the node.
func TestPodContainersListsOnePodWithOneCall(t *testing.T) {
	srv := containerexittest.NewServer(t)
	srv.Set(
		containerexittest.Container{ID: "a1", PodUID: "pod-1", Name: "app", State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: 3},
		containerexittest.Container{ID: "a2", PodUID: "pod-1", Name: "app", Attempt: 1, State: runtimeapi.ContainerState_CONTAINER_CREATED},
		containerexittest.Container{ID: "s1", PodUID: "pod-1", Name: "gcsfuse-sidecar", State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		containerexittest.Container{ID: "u1", PodUID: "pod-1", Name: "odd", State: runtimeapi.ContainerState_CONTAINER_UNKNOWN},
		containerexittest.Container{ID: "x1", PodUID: "pod-2", Name: "app", State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	)
	c := dial(t, srv)

	got, err := c.PodContainers(context.Background(), "pod-1")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, ct := range got {
		lines = append(lines, fmt.Sprintf("%s %s %s %d", ct.ID, ct.Name, ct.State, ct.Attempt))
	}
	slices.Sort(lines)
	want := []string{"a1 app exited 0", "a2 app created 1", "s1 gcsfuse-sidecar running 0", "u1 odd unknown 0"}
	if !slices.Equal(lines, want) {
		t.Fatalf("PodContainers(pod-1) = %q, want %q", lines, want)
	}
	if n := srv.Calls("ListContainers"); n != 1 {
		t.Fatalf("%d ListContainers calls, want 1 (calls: %v)", n, srv.Called())
	}
	for _, ct := range got {
		if want := ct.State != containerexit.StateExited; ct.State.Active() != want {
			t.Errorf("%s: Active() = %v, want %v", ct.State, ct.State.Active(), want)
		}
	}

	none, err := c.PodContainers(context.Background(), "pod-unknown")
	if err != nil || len(none) != 0 {
		t.Fatalf("PodContainers(unknown pod) = %v, %v; want empty, nil", none, err)
	}
}

func TestExitCode(t *testing.T) {
	srv := containerexittest.NewServer(t)
	srv.Set(
		containerexittest.Container{ID: "a1", PodUID: "p", Name: "app", State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: 143},
		containerexittest.Container{ID: "r1", PodUID: "p", Name: "run", State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	)
	c := dial(t, srv)
	if st, err := c.Status(context.Background(), "a1"); err != nil || !st.ExitKnown || st.ExitCode != 143 || st.Name != "app" || st.PodUID != "p" {
		t.Fatalf("Status(a1) = %+v, %v; want app of pod p exited 143", st, err)
	}
	if st, err := c.Status(context.Background(), "r1"); err != nil || st.State != containerexit.StateRunning || st.ExitKnown {
		t.Fatalf("Status(running) = %+v, %v; want running without an exit code", st, err)
	}
	if _, err := c.Status(context.Background(), "gone"); err == nil {
		t.Fatal("Status(missing) succeeded")
	}
}

func TestRuntimeErrorsAreReturned(t *testing.T) {
	srv := containerexittest.NewServer(t)
	srv.FailList(status.Error(codes.Unavailable, "runtime down"))
	c := dial(t, srv)
	if _, err := c.PodContainers(context.Background(), "p"); err == nil || !strings.Contains(err.Error(), "pod p") {
		t.Fatalf("PodContainers error = %v, want one naming the pod", err)
	}
	if _, err := c.PodContainers(context.Background(), ""); err == nil {
		t.Fatal("empty pod UID accepted")
	}
	if _, err := containerexit.Dial("tcp://127.0.0.1:1"); err == nil {
		t.Fatal("tcp endpoint accepted")
	}
}

// A node that keeps thousands of containers answers a node-wide listing of more than gRPC's
// default 4 MiB: it is read, as the kubelet reads it (16 MiB).
func TestListAllOverFourMiB(t *testing.T) {
	srv := containerexittest.NewServer(t)
	// Few containers with long names: the size, not the count, is what this is about, and
	// 20,000 short ones took past ListAll's bound to marshal under -race on a loaded CI
	// (5,000 took 2.8 s there: the bound is raised for this test, the size is what it checks).
	const n = 5000
	name := strings.Repeat("c", 1000)
	cs := make([]containerexittest.Container, 0, n)
	for i := range n {
		cs = append(cs, containerexittest.Container{ID: fmt.Sprintf("%064d", i), PodUID: fmt.Sprintf("pod-%036d", i/4), Name: name,
			State: runtimeapi.ContainerState_CONTAINER_EXITED})
	}
	srv.Set(cs...)
	c := dial(t, srv)
	containerexit.SetListAllTimeout(c, time.Minute)
	got, err := c.ListAll(context.Background())
	if err != nil {
		t.Fatalf("ListAll of %d containers (> 5 MiB): %v", n, err)
	}
	if len(got) != n {
		t.Fatalf("ListAll = %d containers, want %d", len(got), n)
	}
}
