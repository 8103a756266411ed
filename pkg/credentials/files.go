//go:build linux

package credentials

import (
	"os"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// Written says what Write changed.
type Written struct {
	// Token and Config report that the file was (re)written: it was missing or differed.
	Token, Config bool
}

// Write puts p's files for volume into its credentials directory in the pinned emptyDir
// (podfiles.OpenCredentialsDir: each file written atomically, mode 0600 and owned by
// uid/gid, both directories 0700 and owned by uid/gid, nothing followed through a symlink,
// a directory some other user made refused). A file whose content is already the same is
// left alone, so a republish with the same token touches nothing. The token is written
// before the configuration that points to it. KindADC writes nothing.
func Write(emptyDir *os.File, volume string, p *Plan, uid, gid int) (Written, error) {
	var w Written
	if !p.KeyFile() {
		return w, nil
	}
	dir, err := podfiles.OpenCredentialsDir(emptyDir, volume, uid, gid)
	if err != nil {
		return w, err
	}
	defer dir.Close()
	if p.Kind == KindFederation {
		if w.Token, err = dir.WriteToken(p.Token); err != nil {
			return w, err
		}
	}
	if w.Config, err = dir.WriteConfig(p.Config); err != nil {
		return w, err
	}
	return w, nil
}
