package exitcoord

import (
	"context"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/containerexit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
)

// statusOnly is a runtime that answers Status with one container and lists nothing.
type statusOnly struct{ c containerexit.Container }

func (s statusOnly) PodContainers(context.Context, string) ([]containerexit.Container, error) {
	return nil, nil
}

func (s statusOnly) Status(context.Context, string) (containerexit.Container, error) { return s.c, nil }

// An exited container whose status carries no exit code (the runtime lost it, or removed
// the container meanwhile) counts as a failure, never as exit 0: no pod is decided
// succeeded on an exit nobody saw. One whose code is known is taken as it is.
func TestAnExitNobodySawIsAFailure(t *testing.T) {
	listed := lifecycle.RuntimeContainer{Name: "app", ID: "c1", State: containerexit.StateExited.String(), Exited: true}
	for _, tc := range []struct {
		status containerexit.Container
		want   int32
	}{
		{containerexit.Container{ID: "c1", Name: "app", State: containerexit.StateExited}, lifecycle.UnknownExitCode},
		{containerexit.Container{ID: "c1", Name: "app", State: containerexit.StateExited, ExitCode: 3, ExitKnown: true}, 3},
	} {
		l := &ExitCoordinator{Runtime: statusOnly{tc.status}, Log: quiet}
		if code, _ := l.exitOf(context.Background(), listed); code != tc.want {
			t.Errorf("status %+v: exit %d, want %d", tc.status, code, tc.want)
		}
	}
}
