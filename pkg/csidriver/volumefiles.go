package csidriver

import (
	"errors"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// writeCredentials writes the volume's credential files into the pod's gcsfuse-tmp
// emptyDir (nothing for Application Default Credentials).
func (s *NodeServer) writeCredentials(r *request) (credentials.Written, error) {
	if !r.creds.KeyFile() {
		return credentials.Written{}, nil
	}
	emptyDir, name, err := s.filesDir(r)
	if err != nil {
		return credentials.Written{}, err
	}
	defer emptyDir.Close()
	w, err := credentials.Write(emptyDir, name, r.creds, s.cfg.SidecarUID, s.cfg.SidecarGID)
	if err != nil {
		return w, status.Errorf(codes.Internal, "volume %s (bucket %s, identity %s): write credentials for the sidecar: %v",
			r.target.VolumeName, r.volume.Bucket, r.creds.Identity, err)
	}
	return w, nil
}

// writeCABundle writes the driver's extra CA bundle into the pod's gcsfuse-tmp emptyDir,
// beside the volume's credentials (nothing without one).
func (s *NodeServer) writeCABundle(r *request) error {
	if !r.volume.CABundle {
		return nil
	}
	emptyDir, name, err := s.filesDir(r)
	if err != nil {
		return err
	}
	defer emptyDir.Close()
	if _, err := podfiles.WriteCABundle(emptyDir, name, s.cfg.CABundle, s.cfg.SidecarUID, s.cfg.SidecarGID); err != nil {
		return status.Errorf(codes.Internal, "volume %s (bucket %s): write the CA bundle for the sidecar: %v", r.target.VolumeName, r.volume.Bucket, err)
	}
	return nil
}

// filesDir opens the directory a volume's credential files and CA bundle go to, and the
// name they go under: the pod's gcsfuse-tmp emptyDir and the volume's name, or for a shared
// volume the mounter's directory and the sharing key's name.
func (s *NodeServer) filesDir(r *request) (*os.File, string, error) {
	if r.shared != "" {
		d, err := podpath.OpenDir(s.mounterDir())
		if err != nil {
			return nil, "", status.Errorf(codes.Internal, "open the mounter's directory: %v", err)
		}
		return d, r.shared, nil
	}
	d, err := s.openEmptyDir(r.target.PodUID)
	return d, r.target.VolumeName, err
}

func (s *NodeServer) openEmptyDir(podUID string) (*os.File, error) {
	emptyDir, err := podfiles.OpenTmpDir(s.cfg.KubeletRoot, podUID)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, status.Errorf(codes.FailedPrecondition,
				"pod %s has no %q emptyDir volume: is the sidecar injected? annotate the pod with %s: \"true\"",
				podUID, contract.TmpVolumeName, contract.AnnotationInject)
		}
		return nil, status.Errorf(codes.Internal, "open %s emptyDir: %v", contract.TmpVolumeName, err)
	}
	return emptyDir, nil
}

// removeCredentials deletes the credential files of an unpublished target's volume: the
// token and key must not outlive the mount in the pod's emptyDir. Best effort: the
// kubelet deletes the emptyDir with the pod anyway.
func (s *NodeServer) removeCredentials(target string) {
	t, err := podfiles.ParseTarget(s.cfg.KubeletRoot, target)
	if err != nil {
		return
	}
	emptyDir, err := podfiles.OpenTmpDir(s.cfg.KubeletRoot, t.PodUID)
	if err != nil {
		return // the pod's emptyDir is gone already
	}
	defer emptyDir.Close()
	if err := podfiles.RemoveCredentials(emptyDir, t.VolumeName); err != nil {
		s.log.Warn("cannot remove the volume's credential files", "target", target, "err", err)
	}
}
