package podfiles

import (
	"errors"
	"fmt"
	"os"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Modes of a volume's credentials directory and files: the sidecar's user alone reads them.
const (
	credentialsDirMode  = 0o700
	credentialsFileMode = 0o600
)

// CredentialsDir is a volume's credentials directory as the node plugin writes it, on a
// pinned descriptor: every file in it is written atomically (temp file, fchown, fchmod,
// rename), mode 0600 and owned by the sidecar's user, without following a symlink, and left
// alone when it already holds the same bytes (so a republish with the same token touches
// nothing). Each Write reports whether the file was (re)written.
type CredentialsDir struct {
	dir      *os.File
	uid, gid int
}

// OpenCredentialsDir opens volume's credentials directory inside the pinned emptyDir tmp,
// creating both levels if missing, and makes each a 0700 directory of uid/gid; nothing is
// followed through a symlink, and a directory some other user made is refused.
func OpenCredentialsDir(tmp *os.File, volume string, uid, gid int) (*CredentialsDir, error) {
	creds, err := podpath.OwnedDir(tmp, credentialsDir, credentialsDirMode, uid, gid)
	if err != nil {
		return nil, fmt.Errorf("credentials directory: %w", err)
	}
	defer creds.Close()
	d, err := podpath.OwnedDir(creds, volume, credentialsDirMode, uid, gid)
	if err != nil {
		return nil, fmt.Errorf("credentials directory of volume %s: %w", volume, err)
	}
	return &CredentialsDir{dir: d, uid: uid, gid: gid}, nil
}

// Close closes the directory.
func (d *CredentialsDir) Close() error { return d.dir.Close() }

// WriteToken writes the pod's service account token (Workload Identity Federation), which
// the configuration names (Paths.CredentialsTokenFile). Write it before the configuration.
func (d *CredentialsDir) WriteToken(token []byte) (bool, error) {
	return d.writeIfChanged(credentialsTokenFile, token)
}

// WriteConfig writes the file gcsfuse reads with --key-file (Paths.CredentialsConfigFile).
func (d *CredentialsDir) WriteConfig(config []byte) (bool, error) {
	return d.writeIfChanged(credentialsConfigFile, config)
}

// WriteCABundle writes the driver's extra CA bundle (PEM, public; Paths.CABundleFile).
func (d *CredentialsDir) WriteCABundle(pem []byte) (bool, error) {
	return d.writeIfChanged(caBundleFile, pem)
}

// writeIfChanged writes data to name unless the file there already holds exactly data
// (with the right owner and mode).
func (d *CredentialsDir) writeIfChanged(name string, data []byte) (bool, error) {
	if same, _ := podpath.SameFile(d.dir, name, data, credentialsFileMode, d.uid, d.gid); same {
		return false, nil
	}
	if err := podpath.WriteFileAtomicOwned(d.dir, name, data, credentialsFileMode, d.uid, d.gid); err != nil {
		return false, fmt.Errorf("write %s: %w", name, err)
	}
	return true, nil
}

// WriteCABundle puts the driver's extra CA bundle (PEM) for volume into its credentials
// directory inside the pinned emptyDir tmp, with CredentialsDir's guarantees. It reports
// whether the file was (re)written.
func WriteCABundle(tmp *os.File, volume string, pem []byte, uid, gid int) (bool, error) {
	d, err := OpenCredentialsDir(tmp, volume, uid, gid)
	if err != nil {
		return false, err
	}
	defer d.Close()
	return d.WriteCABundle(pem)
}

// CredentialVolumes lists the volumes with a credentials directory inside the pinned
// emptyDir tmp (none when it has no credentials directory).
func CredentialVolumes(tmp *os.File) ([]string, error) {
	creds, err := podpath.OpenSub(tmp, credentialsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer creds.Close()
	return creds.Readdirnames(-1)
}

// RemoveCredentials deletes volume's credential files, its CA bundle and its directory
// (unpublish), without following a symlink. Missing files are not an error.
func RemoveCredentials(tmp *os.File, volume string) error {
	creds, err := podpath.OpenSub(tmp, credentialsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer creds.Close()
	dir, err := podpath.OpenSub(creds, volume)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	rerr := errors.Join(podpath.Remove(dir, credentialsConfigFile), podpath.Remove(dir, credentialsTokenFile),
		podpath.Remove(dir, caBundleFile))
	dir.Close()
	if rerr != nil {
		return rerr
	}
	if err := podpath.RemoveDir(creds, volume); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
