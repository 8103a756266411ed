package csidriver

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
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

// PodLookup returns the pod with uid from the caller's cache (known=false while the pod
// is not in it). The pod must not be modified (nodevolume.PodLookup).
type PodLookup = nodevolume.PodLookup

// checkSidecar fails with FailedPrecondition when the pod is known to have no sidecar, and
// returns the pod when it is known (the mount's ownership depends on its spec). A pod the
// cache does not show within podLookupWait is given the benefit of the doubt: nil, nil.
//
// need is false for a pod whose volume is shared (the node's mounter serves it): the pod
// is then only looked up, for the mount's owner.
func (s *NodeServer) checkSidecar(ctx context.Context, pod PodRef, need bool) (*corev1.Pod, error) {
	if s.cfg.Pods == nil || pod.UID == "" {
		return nil, nil
	}
	deadline := time.Now().Add(podLookupWait)
	for {
		p, known := s.cfg.Pods(pod.UID)
		switch {
		case known && (!need || hasSidecar(p)):
			return p, nil
		case known:
			return nil, status.Errorf(codes.FailedPrecondition,
				"pod %s/%s has no %s container, so nothing would serve this volume: the gcsfuse webhook did not inject it (was it down when the pod was created, was the claim bound after, or does the pod set %s: \"false\"?); recreate the pod",
				pod.Namespace, pod.Name, contract.SidecarContainerName, contract.AnnotationInject)
		case time.Now().After(deadline):
			s.log.Warn("pod not in the pod watcher's cache; cannot check that it has a gcsfuse sidecar, and only its fsGroup sets the mount's owner", "pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID)
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(podLookupInterval):
		}
	}
}

// hasSidecar reports whether pod has a container named like the sidecar, native or not.
func hasSidecar(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == contract.SidecarContainerName {
				return true
			}
		}
	}
	return false
}
