package csidriver

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

const (
	// mounterGoneWait bounds a stopping node plugin's wait for a stopping mounter to end
	// before it removes the shared directory: uninstalling deletes both DaemonSets at
	// once, and a mounter with no mount ends in a moment.
	mounterGoneWait = 5 * time.Second
	// mounterStopNotice: a mounter that runs and has not said it is stopping by then is
	// staying (the node plugin alone is being replaced), and so does the directory.
	mounterStopNotice = time.Second
	// mounterGonePoll is how often the wait looks.
	mounterGonePoll = 100 * time.Millisecond
)

// CleanUpShared removes the shared directory when nothing on the node uses it any more: no
// mount under it and no mounter running (podfiles.LockMounterGone). Called by a stopping
// node plugin once its gRPC server has stopped, so no publish makes a mount meanwhile; it
// reports whether it removed the directory. Uninstalling the driver then leaves nothing of
// the shared mode on the host; a node plugin restarted makes the directory again, and a
// mounter that started meanwhile finds its directory gone and exits to be started again in
// the new one (podfiles.HoldMounterRunning).
//
// Kept, and logged: mounts still there (pods still use them: drain the node first,
// docs/upgrade.md), or a mounter that runs and is not stopping.
func (s *NodeServer) CleanUpShared() bool {
	if s.shared == nil {
		return false
	}
	return cleanUpSharedDir(s.cfg.SharedDir, s.log)
}

func cleanUpSharedDir(sharedDir string, log *slog.Logger) bool {
	mounterDir := filepath.Join(sharedDir, sharedMounterDir)
	mounts, err := fusemount.MountsUnder(sharedDir)
	if err != nil || len(mounts) > 0 {
		log.Info("shared directory kept: mounts under it still serve pods", "dir", sharedDir, "mounts", len(mounts), "err", err)
		return false
	}
	dir, err := podpath.OpenDir(mounterDir)
	if errors.Is(err, fs.ErrNotExist) {
		return removeSharedDir(sharedDir, log)
	}
	if err != nil {
		log.Warn("shared directory kept: cannot open the mounter's directory", "dir", mounterDir, "err", err)
		return false
	}
	defer dir.Close()
	start := time.Now()
	for {
		gone, unlock, err := podfiles.LockMounterGone(dir)
		if err != nil {
			log.Warn("shared directory kept: cannot tell whether the mounter runs", "err", err)
			return false
		}
		if gone {
			// Under the lock: a mounter starting now waits, then finds the directory gone.
			defer unlock()
			return removeSharedDir(sharedDir, log)
		}
		waited := time.Since(start)
		if stopping, _, _ := podfiles.ReadMounterStopping(dir); (!stopping && waited >= mounterStopNotice) || waited >= mounterGoneWait {
			log.Info("shared directory kept: the node's mounter runs", "stopping", stopping, "waited", waited.Round(time.Millisecond).String())
			return false
		}
		time.Sleep(mounterGonePoll)
	}
}

// removeSharedDir removes the shared directory: the mount points under mnt/ one by one
// with rmdir, which never descends into a mount that a publish still running made after the
// check (it fails, busy), then the mounter's directory with os.RemoveAll (it opens each
// directory relative to its parent without following a symlink, so nothing the mounter's
// user left there leads it outside; no mount is ever made there), then the two directories.
// Anything else there is left, and said.
func removeSharedDir(sharedDir string, log *slog.Logger) bool {
	mnt := filepath.Join(sharedDir, sharedMountDir)
	entries, err := os.ReadDir(mnt)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("shared directory kept: cannot list its mount points", "dir", mnt, "err", err)
		return false
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.Remove(filepath.Join(mnt, e.Name())))
	}
	errs = append(errs, os.RemoveAll(filepath.Join(sharedDir, sharedMounterDir)), removeDir(mnt), removeDir(sharedDir))
	if err := errors.Join(errs...); err != nil {
		log.Warn("cannot remove the shared directory whole", "dir", sharedDir, "err", err)
		return false
	}
	log.Info("shared directory removed: no mount and no mounter left on the node", "dir", sharedDir)
	return true
}

// removeDir is rmdir, a directory already gone being no error.
func removeDir(dir string) error {
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
