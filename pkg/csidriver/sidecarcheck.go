package csidriver

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// A pod whose volume of this driver has no gcsfuse sidecar can never use it: the mount
// would be made and never served. The webhook injects the sidecar into every pod that uses
// the driver, but a pod can still come without one: created while the webhook was down (its
// entry for pods with claims fails open), a claim bound after admission, an opt-out. The
// node plugin refuses such a mount, so that the kubelet's FailedMount Event says why instead
// of the pod hanging on its first access.

// Sidecar lookups at NodePublishVolume: how long the pod watcher's cache may take to show a
// pod the kubelet already has, and how often to look.
const (
	podLookupWait     = 2 * time.Second
	podLookupInterval = 50 * time.Millisecond
)

// SidecarLookup reports whether the pod with uid has the gcsfuse sidecar (known=false
// while the pod is not in the caller's cache).
type SidecarLookup func(uid string) (has, known bool)

// checkSidecar fails with FailedPrecondition when the pod is known to have no sidecar. A
// pod the cache does not show within podLookupWait is given the benefit of the doubt.
func (s *NodeServer) checkSidecar(ctx context.Context, pod PodRef) error {
	if s.cfg.HasSidecar == nil || pod.UID == "" {
		return nil
	}
	deadline := time.Now().Add(podLookupWait)
	for {
		has, known := s.cfg.HasSidecar(pod.UID)
		switch {
		case known && has:
			return nil
		case known:
			return status.Errorf(codes.FailedPrecondition,
				"pod %s/%s has no %s container, so nothing would serve this volume: the gcsfuse webhook did not inject it (was it down when the pod was created, was the claim bound after, or does the pod set %s: \"false\"?); recreate the pod",
				pod.Namespace, pod.Name, contract.SidecarContainerName, contract.AnnotationInject)
		case time.Now().After(deadline):
			s.log.Warn("pod not in the pod watcher's cache; cannot check that it has a gcsfuse sidecar", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID)
			return nil
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(podLookupInterval):
		}
	}
}
