package exitcoord

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
)

// objectRecorder is a record.EventRecorder that keeps the object of each Event.
type objectRecorder struct {
	refs                   []*corev1.ObjectReference
	types, reasons, bodies []string
}

func (r *objectRecorder) Event(obj runtime.Object, typ, reason, message string) {
	ref, _ := obj.(*corev1.ObjectReference)
	r.refs, r.types, r.reasons, r.bodies = append(r.refs, ref), append(r.types, typ), append(r.reasons, reason), append(r.bodies, message)
}

func (r *objectRecorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	panic("Events records with Event only")
}

func (r *objectRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	panic("Events records with Event only")
}

// An Event reaches the pod it is about (namespace, name and UID: the API server files it
// under the pod by them), with the reason and message given, Warning when asked and Normal
// otherwise.
func TestEventsAreRecordedOnTheirPod(t *testing.T) {
	rec := &objectRecorder{}
	ev := Events{Recorder: rec}
	ev.PodEvent(csidriver.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}, true, "SidecarExitFailed", "cannot write")
	ev.PodEvent(csidriver.PodRef{Namespace: "ns2", Name: "q", UID: "uid-2"}, false, "SidecarDraining", "draining")
	want := []corev1.ObjectReference{
		{Kind: "Pod", APIVersion: "v1", Namespace: "ns", Name: "p", UID: "uid-1"},
		{Kind: "Pod", APIVersion: "v1", Namespace: "ns2", Name: "q", UID: "uid-2"},
	}
	if len(rec.refs) != 2 {
		t.Fatalf("%d Events, want 2", len(rec.refs))
	}
	for i, w := range want {
		if rec.refs[i] == nil || *rec.refs[i] != w {
			t.Errorf("Event %d on %+v, want %+v", i, rec.refs[i], w)
		}
	}
	if rec.types[0] != corev1.EventTypeWarning || rec.types[1] != corev1.EventTypeNormal {
		t.Errorf("Event types %q, want Warning then Normal", rec.types)
	}
	if rec.reasons[0] != "SidecarExitFailed" || rec.reasons[1] != "SidecarDraining" || rec.bodies[0] != "cannot write" || rec.bodies[1] != "draining" {
		t.Errorf("reasons %q, messages %q", rec.reasons, rec.bodies)
	}
}
