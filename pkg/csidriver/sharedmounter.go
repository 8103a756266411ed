package csidriver

import (
	"context"
	"log/slog"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
)

// sharedMounter is the mounter of the shared mode (mountMode: shared): the target is a bind
// of the node's shared mount of the volume's key, which the node's mounter serves
// (shared.go, the table in pkg/sharedmount). No sidecar is needed.
type sharedMounter struct{ s *NodeServer }

func (m sharedMounter) mode() string           { return contract.ModeShared }
func (m sharedMounter) admit(r *request) error { return m.s.checkSharedADC(r) }
func (m sharedMounter) needsSidecar() bool     { return false }

func (m sharedMounter) owns(target string) bool { return m.s.shared.NameOf(target) != "" }

func (m sharedMounter) publish(ctx context.Context, req *csi.NodePublishVolumeRequest, r *request, log *slog.Logger) error {
	return m.s.publishShared(ctx, r, req.GetTargetPath(), req.GetVolumeContext(), req.GetSecrets(), log)
}

// refresh writes the pod's fresh token into its mount's files, which the mounter reads,
// under the key's lock: never beside the mount's stop.
func (m sharedMounter) refresh(_ context.Context, req *csi.NodePublishVolumeRequest, r *request) (credentials.Written, error) {
	s, target := m.s, req.GetTargetPath()
	var w credentials.Written
	bound, err := s.shared.WithTarget(target, func(mount string) error {
		// A republish that would change who reads (the Secret now holding another
		// service account's key) must not write its credentials into a mount other pods
		// share; a rotated key of the same account is the same reader.
		if prev, ok := s.sharedPlanOf(target); ok && principal(prev) != principal(r.creds) {
			return status.Errorf(codes.AlreadyExists, "target %s is already published for %s; this publish is for %s (shared mount %s)",
				target, principal(prev), principal(r.creds), mount)
		}
		if err := s.useSharedKey(r, mount, req.GetVolumeContext(), req.GetSecrets()); err != nil {
			return err
		}
		s.rememberPlan(target, r)
		var werr error
		w, werr = s.writeCredentials(r)
		return werr
	})
	if err != nil || bound {
		return w, err
	}
	// Unbound meanwhile (it is not: the caller holds the target's lock): the pod's own files.
	return s.writeCredentials(r)
}

// unpublish unmounts the target's bind and unbinds it from its key: the key's mount
// lingers (Config.SharedLinger) once no target is bound, and another pod's token is handed
// to it when this pod's carried it (handOverToken).
func (m sharedMounter) unpublish(ctx context.Context, target string, log *slog.Logger) error {
	s := m.s
	start := time.Now()
	if err := s.unmountTarget(ctx, target); err != nil {
		return err
	}
	if name, remaining := s.shared.Unbound(target, func(mount string, _ int) { s.handOverToken(target, mount) }); name != "" {
		log.Info("shared volume unbound", "mount", name, "stillBound", remaining, "ms", time.Since(start).Milliseconds())
		return nil
	}
	s.dropOffer(&offerRecord{Target: target})
	s.removeCredentials(target)
	return nil
}

// checkSharedADC refuses a new shared publish that would read with the mounter's
// Application Default Credentials for a pod outside Config.SharedADC (PermissionDenied,
// credentials.SharedADCRefusal). Only a new one: a republish of a target already mounted
// (every minute with requiresRepublish) keeps what its first publish was allowed, so that
// narrowing the namespaces never turns a running pod's republishes into a Warning a minute.
// The namespace is the kubelet's (podInfoOnMount), checked against the pod watcher's where it
// knows the pod, since an inline volume's attributes could carry another.
func (s *NodeServer) checkSharedADC(r *request) error {
	if !r.opts.Shared || r.creds.Kind != credentials.KindADC {
		return nil
	}
	ns := r.pod.Namespace
	if s.cfg.Pods != nil {
		if p, ok := s.cfg.Pods(r.pod.UID); ok && p.Namespace != ns {
			return status.Errorf(codes.PermissionDenied, "volume %s: the volume context names namespace %q, the pod %s is in %q", r.target.VolumeName, ns, r.pod.UID, p.Namespace)
		}
	}
	if !s.cfg.SharedADC.Allows(ns) {
		return status.Error(codes.PermissionDenied, credentials.SharedADCRefusal(r.target.VolumeName, ns))
	}
	return nil
}
