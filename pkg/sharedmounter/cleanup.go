package sharedmounter

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
	// mounterGoneWait bounds a stopping node plugin's wait for a stopping mounter (its
	// mounter-stopping record there) to end before it removes the shared directory: a
	// mounter with no mount ends in a moment. Within the node plugin's grace (10 s), after
	// its gRPC server's stop (5 s at most).
	mounterGoneWait = 3 * time.Second
	// publishesGoneWait bounds CleanUp's wait for shared publishes still running.
	publishesGoneWait = time.Second
	// mounterGonePoll is how often the waits look.
	mounterGonePoll = 100 * time.Millisecond
)

// CleanUp removes the shared directory when nothing on the node uses it any more: no
// mount under it and no mounter running (podfiles.LockMounterGone), waiting up to
// mounterGoneWait for a mounter that is stopping. Called by a stopping node plugin once its
// gRPC server has stopped (a publish that outlived the stop's bound is caught by the mount
// checks); it reports whether it removed the directory. Uninstalling the driver the way
// docs/upgrade.md says (the mounter's DaemonSet first) then leaves nothing of the shared
// mode on the host; a node plugin restarted makes the directory again, and a mounter that
// started meanwhile finds its directory gone and exits to be started again in the new one
// (podfiles.HoldMounterRunning).
//
// Kept, and logged: mounts still there (pods still use them: drain the node first), or a
// mounter that runs and is not stopping (the node plugin alone replaced).
func (m *Mounter) CleanUp() bool {
	// No shared publish runs from here on: one the gRPC server's stop left running is
	// waited for (bounded); one still running then keeps the directory.
	deadline := time.Now().Add(publishesGoneWait)
	for !m.gate.TryLock() {
		if time.Now().After(deadline) {
			m.cfg.Log.Info("shared directory kept: a shared publish is still running")
			return false
		}
		time.Sleep(mounterGonePoll)
	}
	m.closed = true
	m.gate.Unlock()
	return cleanUpSharedDir(m.cfg.Dir, m.cfg.Log)
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
		// A mounter that runs and has not said it is stopping stays (the node plugin alone
		// is being replaced), and so does the directory, at once.
		waited := time.Since(start)
		if stopping, _, _ := podfiles.ReadMounterStopping(dir); !stopping || waited >= mounterGoneWait {
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
	// Stop at the first mount point that does not go: a publish still running may have
	// mounted it after the check, and the mounter's files are then still needed.
	for _, e := range entries {
		if err := os.Remove(filepath.Join(mnt, e.Name())); err != nil {
			log.Warn("shared directory kept: a mount point under it does not go", "dir", mnt, "err", err)
			return false
		}
	}
	if mounts, err := fusemount.MountsUnder(sharedDir); err != nil || len(mounts) > 0 {
		log.Warn("shared directory kept: a mount appeared under it", "mounts", mounts, "err", err)
		return false
	}
	if err := errors.Join(os.RemoveAll(filepath.Join(sharedDir, sharedMounterDir)), removeDir(mnt), removeDir(sharedDir)); err != nil {
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
