package nodevolume

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Files writes and removes a volume's credential files and CA bundle where its gcsfuse
// reads them: a pod's gcsfuse-tmp emptyDir under the volume's name, or a shared volume's in
// the node mounter's directory under its mount's name.
type Files struct {
	// KubeletRoot is the kubelet's root directory (/var/lib/kubelet).
	KubeletRoot string
	// MounterDir is the node mounter's directory on the host (empty: no shared mode).
	MounterDir string
	// UID and GID own the files (the sidecar's user).
	UID, GID int
	// CABundle is the driver's extra CA bundle (nil: none).
	CABundle []byte
	Log      *slog.Logger
}

// NewFiles checks f: the kubelet root and a mounter directory are absolute paths.
func NewFiles(f Files) (*Files, error) {
	if !filepath.IsAbs(f.KubeletRoot) {
		return nil, fmt.Errorf("volume files: kubelet root %q is not an absolute path", f.KubeletRoot)
	}
	if f.MounterDir != "" && !filepath.IsAbs(f.MounterDir) {
		return nil, fmt.Errorf("volume files: mounter directory %q is not an absolute path", f.MounterDir)
	}
	if f.UID < 0 || f.GID < 0 {
		return nil, fmt.Errorf("volume files: uid/gid %d/%d must not be negative", f.UID, f.GID)
	}
	if f.Log == nil {
		f.Log = slog.Default()
	}
	return &f, nil
}

// WriteCredentials writes the volume's credential files (nothing for Application Default
// Credentials).
func (f *Files) WriteCredentials(r *Request) (credentials.Written, error) {
	if !r.Creds.KeyFile() {
		return credentials.Written{}, nil
	}
	dir, name, err := f.dir(r)
	if err != nil {
		return credentials.Written{}, err
	}
	defer dir.Close()
	w, err := credentials.Write(dir, name, r.Creds, f.UID, f.GID)
	if err != nil {
		return w, status.Errorf(codes.Internal, "volume %s (bucket %s, identity %s): write credentials for the sidecar: %v",
			r.Target.VolumeName, r.Volume.Bucket, r.Creds.Identity, err)
	}
	return w, nil
}

// WriteCABundle writes the driver's extra CA bundle beside the volume's credentials
// (nothing without one).
func (f *Files) WriteCABundle(r *Request) error {
	if !r.Volume.CABundle {
		return nil
	}
	dir, name, err := f.dir(r)
	if err != nil {
		return err
	}
	defer dir.Close()
	if _, err := podfiles.WriteCABundle(dir, name, f.CABundle, f.UID, f.GID); err != nil {
		return status.Errorf(codes.Internal, "volume %s (bucket %s): write the CA bundle for the sidecar: %v", r.Target.VolumeName, r.Volume.Bucket, err)
	}
	return nil
}

// dir opens the directory a volume's files go to, and the name they go under.
func (f *Files) dir(r *Request) (*os.File, string, error) {
	if r.Shared != "" {
		d, err := podpath.OpenDir(f.MounterDir)
		if err != nil {
			return nil, "", status.Errorf(codes.Internal, "open the mounter's directory: %v", err)
		}
		return d, r.Shared, nil
	}
	d, err := f.OpenEmptyDir(r.Target.PodUID)
	return d, r.Target.VolumeName, err
}

// OpenEmptyDir opens the pod's gcsfuse-tmp emptyDir: FailedPrecondition when the pod has
// none (no sidecar injected).
func (f *Files) OpenEmptyDir(podUID string) (*os.File, error) {
	emptyDir, err := podfiles.OpenTmpDir(f.KubeletRoot, podUID)
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

// RemoveCredentials deletes the credential files of an unpublished target's volume from
// its pod's emptyDir: the token and key must not outlive the mount. Best effort: the
// kubelet deletes the emptyDir with the pod anyway.
func (f *Files) RemoveCredentials(target string) {
	t, err := podfiles.ParseTarget(f.KubeletRoot, target)
	if err != nil {
		return
	}
	emptyDir, err := podfiles.OpenTmpDir(f.KubeletRoot, t.PodUID)
	if err != nil {
		return // the pod's emptyDir is gone already
	}
	defer emptyDir.Close()
	if err := podfiles.RemoveCredentials(emptyDir, t.VolumeName); err != nil {
		f.Log.Warn("cannot remove the volume's credential files", "target", target, "err", err)
	}
}
