package nodevolume

import (
	"context"
	"log/slog"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
)

// Mounter serves the volumes of one mount mode for the Node service. The service chooses
// it: a new publish by the volume's mode, anything on a published target by who published
// it (Owns). The two are pkg/sidecarmounter (a FUSE mount whose descriptor is offered to the
// pod's sidecar) and pkg/sharedmounter (a bind of the node's shared mount of the volume's
// key); csidriver's node_mounter_test.go gives the service fakes.
type Mounter interface {
	// Mode names the mode it serves (contract.ModeShared, or "sidecar"): two targets are
	// the same volume only in the same mode.
	Mode() string
	// Admit refuses a new publish for reasons of the mode alone, before the pod is
	// checked (nil: go on).
	Admit(r *Request) error
	// NeedsSidecar reports whether the pod must carry the driver's sidecar.
	NeedsSidecar() bool
	// Publish mounts a new target for r. The caller holds the target's lock and records
	// the publication (r.Volume as Publish leaves it) once it returns nil.
	Publish(ctx context.Context, req *csi.NodePublishVolumeRequest, r *Request, log *slog.Logger) error
	// Refresh answers a republish of a target it published, of the same volume: the
	// credentials that changed are written again (with requiresRepublish, every minute).
	Refresh(ctx context.Context, req *csi.NodePublishVolumeRequest, r *Request) (credentials.Written, error)
	// Owns reports whether target is one of its publications, those found at start-up too.
	Owns(target string) bool
	// Unpublish stops serving target, unmounts it and forgets it; an absent or unmounted
	// target is a success. The caller holds the target's lock.
	Unpublish(ctx context.Context, target string, log *slog.Logger) error
}

// StatusRecorder records a gcsfuse's report about a volume published at publishedAt
// (csidriver's Metrics; a nil *Metrics records nothing).
type StatusRecorder interface {
	Status(st *handoff.Status, publishedAt time.Time)
}

// NoStatus records nothing: a mounter's StatusRecorder when none is given.
type NoStatus struct{}

func (NoStatus) Status(*handoff.Status, time.Time) {}
