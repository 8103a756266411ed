//go:build linux

package credentials

import (
	"errors"
	"fmt"
	"os"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// File modes: the sidecar's user alone reads a volume's credentials.
const (
	dirMode  = 0o700
	fileMode = 0o600
)

// Written says what Write changed.
type Written struct {
	// Token and Config report that the file was (re)written: it was missing or differed.
	Token, Config bool
}

// Write puts p's files for volume into <emptyDir>/credentials/<volume>/, each written
// atomically (temp file, fchown, fchmod, rename), mode 0600 and owned by uid/gid, with both
// directories 0700 and owned by uid/gid; everything relative to the pinned emptyDir without
// following a symlink, and a directory some other user made is refused. A file whose content
// is already the same is left alone, so a republish with the same token touches nothing.
// The token is written before the configuration that points to it. KindADC writes nothing.
func Write(emptyDir *os.File, volume string, p *Plan, uid, gid int) (Written, error) {
	var w Written
	if !p.KeyFile() {
		return w, nil
	}
	dir, err := volumeDir(emptyDir, volume, uid, gid)
	if err != nil {
		return w, err
	}
	defer dir.Close()
	if p.Kind == KindFederation {
		if w.Token, err = writeIfChanged(dir, contract.CredentialsTokenFile, p.Token, uid, gid); err != nil {
			return w, err
		}
	}
	if w.Config, err = writeIfChanged(dir, contract.CredentialsConfigFile, p.Config, uid, gid); err != nil {
		return w, err
	}
	return w, nil
}

// WriteCABundle puts the driver's extra CA bundle (PEM, public) for volume into
// <emptyDir>/credentials/<volume>/ca.pem, with Write's guarantees (atomic, 0600 and owned by
// uid/gid, no symlink followed, left alone when already the same). It reports whether the
// file was (re)written.
func WriteCABundle(emptyDir *os.File, volume string, pem []byte, uid, gid int) (bool, error) {
	dir, err := volumeDir(emptyDir, volume, uid, gid)
	if err != nil {
		return false, err
	}
	defer dir.Close()
	return writeIfChanged(dir, contract.CABundleFile, pem, uid, gid)
}

// Remove deletes volume's credential files, its CA bundle and the directory (unpublish).
// Missing files are not an error.
func Remove(emptyDir *os.File, volume string) error {
	creds, err := openDir(emptyDir, contract.CredentialsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer creds.Close()
	dir, err := openDir(creds, volume)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	rerr := errors.Join(podpath.Remove(dir, contract.CredentialsConfigFile), podpath.Remove(dir, contract.CredentialsTokenFile),
		podpath.Remove(dir, contract.CABundleFile))
	dir.Close()
	if rerr != nil {
		return rerr
	}
	if err := podpath.RemoveDir(creds, volume); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func openDir(parent *os.File, name string) (*os.File, error) { return podpath.OpenSub(parent, name) }

func volumeDir(emptyDir *os.File, volume string, uid, gid int) (*os.File, error) {
	creds, err := podpath.OwnedDir(emptyDir, contract.CredentialsDir, dirMode, uid, gid)
	if err != nil {
		return nil, fmt.Errorf("credentials directory: %w", err)
	}
	defer creds.Close()
	d, err := podpath.OwnedDir(creds, volume, dirMode, uid, gid)
	if err != nil {
		return nil, fmt.Errorf("credentials directory of volume %s: %w", volume, err)
	}
	return d, nil
}

// writeIfChanged writes data to name unless the file there already holds exactly data
// (with the right owner and mode).
func writeIfChanged(dir *os.File, name string, data []byte, uid, gid int) (bool, error) {
	if same, _ := podpath.SameFile(dir, name, data, fileMode, uid, gid); same {
		return false, nil
	}
	if err := podpath.WriteFileAtomicOwned(dir, name, data, fileMode, uid, gid); err != nil {
		return false, fmt.Errorf("write %s: %w", name, err)
	}
	return true, nil
}
