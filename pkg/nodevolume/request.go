package nodevolume

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// Request is a validated NodePublishVolumeRequest (csidriver's validatePublish).
type Request struct {
	Target podfiles.Target
	Pod    PodRef
	Volume handoff.Volume
	Opts   *mountopts.Volume
	// Creds is the volume's identity and the files that carry it (secret: never logged).
	Creds *credentials.Plan
	// Shared is the sharing key's mount name of a shared volume (pkg/sharedmounter sets
	// it), "" otherwise: its files go to the mounter's directory under that name.
	Shared string
}

// PodRef names the pod a volume belongs to, for Events.
type PodRef struct{ Namespace, Name, UID string }

// EventSink records Events on pods. Implementations must not block.
type EventSink interface {
	PodEvent(pod PodRef, warning bool, reason, message string)
}

// PodEventTo records an Event on pod through sink: nothing without a sink, or for a pod whose
// name is not known (one found at start-up before the pod watcher knows it).
func PodEventTo(sink EventSink, pod PodRef, warning bool, reason, msg string) {
	if sink != nil && pod.Name != "" {
		sink.PodEvent(pod, warning, reason, msg)
	}
}

// PodLookup returns the pod with uid from the caller's cache (known=false while the pod
// is not in it). The pod must not be modified.
type PodLookup func(uid string) (pod *corev1.Pod, known bool)
