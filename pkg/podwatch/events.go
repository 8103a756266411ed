package podwatch

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// EventComponent is the source component of the Events the node plugin emits.
const EventComponent = "gcsfuse-csi-node"

// NewEventRecorder returns a recorder that writes Events, such as a sidecar failure, on the
// pods they concern, where `kubectl describe pod` shows them to the user. Events are sent
// asynchronously by client-go's broadcaster (which also aggregates repeats and rate-limits):
// recording never waits for the API server, so an unreachable one delays nothing; Events
// beyond the broadcaster's queue are dropped. Call stop when the node plugin shuts down to
// end its goroutines. Events not yet sent by then are lost, which is acceptable for
// diagnostics.
func NewEventRecorder(client kubernetes.Interface, nodeName string) (recorder record.EventRecorder, stop func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent, Host: nodeName})
	return recorder, b.Shutdown
}
