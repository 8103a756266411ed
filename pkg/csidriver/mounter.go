package csidriver

import (
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mountLookup says what is mounted at a path (fusemount.Lookup; tests give another).
type mountLookup func(path string) (*fusemount.Info, error)

// mounterFor is the mounter a new publish of r goes to: the shared one for a volume whose
// mode is shared (refused when the node has no shared mode), the sidecar's otherwise.
func (s *NodeServer) mounterFor(r *nodevolume.Request) (nodevolume.Mounter, error) {
	if !r.Opts.Shared {
		return s.sidecarMounter, nil
	}
	if s.sharedMounter == nil {
		return nil, sharedRefusal(r.Target.VolumeName)
	}
	return s.sharedMounter, nil
}

// mounterOf is the mounter that published target: the shared one when its table has the
// target, the sidecar's for any other (one published before a restart included).
func (s *NodeServer) mounterOf(target string) nodevolume.Mounter {
	if s.sharedMounter != nil && s.sharedMounter.Owns(target) {
		return s.sharedMounter
	}
	return s.sidecarMounter
}

// sharedRefusal is the error for a shared volume on a node plugin without the mounter.
func sharedRefusal(volume string) error {
	return status.Errorf(codes.FailedPrecondition,
		"volume %s asks for %s: %s, and this driver runs without the node's shared mounter (the chart's mounter.enabled is false, so the node plugin has no --shared-dir): enable it, or remove %s",
		volume, contract.AttrMountMode, contract.MountModeShared, contract.AttrMountMode)
}
