package csidriver

import (
	"context"
	"log/slog"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
)

// mounter serves the volumes of one mount mode for the Node service (node.go). The service
// validates each call, holds its target's lock, answers repeated calls from what it recorded
// and chooses the mounter: a new publish by the volume's mode (mounterFor), anything on a
// published target by who published it (mounterOf). It never branches on the mode beyond
// that choice. The two are sidecarMounter (sidecarmount.go: a FUSE mount whose descriptor
// is offered to the pod's sidecar) and sharedMounter (sharedmounter.go: a bind of the node's
// shared mount of the volume's key); node_mounter_test.go gives the service fakes.
type mounter interface {
	// mode names the mode it serves (contract.ModeShared, or "sidecar"): two targets are
	// the same volume only in the same mode.
	mode() string
	// admit refuses a new publish for reasons of the mode alone, before the pod is
	// checked (nil: go on).
	admit(r *request) error
	// needsSidecar reports whether the pod must carry the driver's sidecar.
	needsSidecar() bool
	// publish mounts a new target for r. The caller holds the target's lock and records
	// the publication (r.volume as publish leaves it) once it returns nil.
	publish(ctx context.Context, req *csi.NodePublishVolumeRequest, r *request, log *slog.Logger) error
	// refresh answers a republish of a target it published, of the same volume: the
	// credentials that changed are written again (with requiresRepublish, every minute).
	refresh(ctx context.Context, req *csi.NodePublishVolumeRequest, r *request) (credentials.Written, error)
	// owns reports whether target is one of its publications, those found at start-up too.
	owns(target string) bool
	// unpublish stops serving target, unmounts it and forgets it; an absent or unmounted
	// target is a success. The caller holds the target's lock.
	unpublish(ctx context.Context, target string, log *slog.Logger) error
}

// mountLookup says what is mounted at a path (fusemount.Lookup; tests give another).
type mountLookup func(path string) (*fusemount.Info, error)

// mounterFor is the mounter a new publish of r goes to: the shared one for a volume whose
// mode is shared (refused when the node has no shared mode), the sidecar's otherwise.
func (s *NodeServer) mounterFor(r *request) (mounter, error) {
	if !r.opts.Shared {
		return s.sidecarMounter, nil
	}
	if s.sharedMounter == nil {
		return nil, sharedRefusal(r.target.VolumeName)
	}
	return s.sharedMounter, nil
}

// mounterOf is the mounter that published target: the shared one when its table has the
// target, the sidecar's for any other (one published before a restart included).
func (s *NodeServer) mounterOf(target string) mounter {
	if s.sharedMounter != nil && s.sharedMounter.owns(target) {
		return s.sharedMounter
	}
	return s.sidecarMounter
}
