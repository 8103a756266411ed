package sidecar

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// mounterDir is a mounter's directory with its running lock file, as the node plugin
// prepares it, opened; and a Sidecar in shared mode on it.
func mounterDir(t *testing.T) (*Sidecar, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mounter")
	if err := os.Mkdir(path, 0o750); err != nil {
		t.Fatal(err)
	}
	dir, err := podpath.OpenDir(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	if err := podfiles.CreateMounterRunning(dir); err != nil {
		t.Fatal(err)
	}
	return newSidecar(Config{TmpDir: path, Mode: contract.ModeShared, Log: slog.New(slog.DiscardHandler)}), dir
}

// A lock file replaced under the mounter (the next node plugin would lock the new one and
// could remove the directory under it) is locked again; a directory removed with no mount
// served ends the mounter, to be started again in the new one.
func TestKeepMounterRunning(t *testing.T) {
	s, dir := mounterDir(t)
	running, err := podfiles.HoldMounterRunning(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { running.Close() }()
	if err := s.keepMounterRunning(dir, &running); err != nil {
		t.Fatalf("nothing changed: %v", err)
	}
	old := running
	lock := filepath.Join(dir.Name(), podfiles.MounterRunningFile)
	if err := os.Rename(lock, lock+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := podfiles.CreateMounterRunning(dir); err != nil { // the next node plugin's start
		t.Fatal(err)
	}
	if err := s.keepMounterRunning(dir, &running); err != nil || running == old {
		t.Fatalf("after the lock file was replaced: %v, same file %v", err, running == old)
	}
	if gone, unlock, err := podfiles.LockMounterGone(dir); gone || err != nil {
		if unlock != nil {
			unlock()
		}
		t.Errorf("the node plugin took the new lock file under a running mounter: %v, %v", gone, err)
	}
	if err := os.RemoveAll(dir.Name()); err != nil {
		t.Fatal(err)
	}
	if err := s.keepMounterRunning(dir, &running); !errors.Is(err, podfiles.ErrDirRemoved) {
		t.Errorf("directory removed, no mount served: %v, want ErrDirRemoved", err)
	}
}

// A mounter waiting for its directory stops at SIGTERM, at once, exit code 0.
func TestHoldMounterRunningStopsOnSignal(t *testing.T) {
	s, dir := mounterDir(t)
	gone, unlock, err := podfiles.LockMounterGone(dir) // a node plugin holding it exclusively
	if err != nil || !gone {
		t.Fatalf("LockMounterGone: %v, %v", gone, err)
	}
	defer unlock()
	terminate := make(chan os.Signal, 1)
	terminate <- os.Interrupt
	start := time.Now()
	f, code, ok := s.holdMounterRunning(t.Context(), dir, terminate)
	if ok || f != nil || code != 0 {
		t.Errorf("holdMounterRunning = %v, %d, %v; want stopped, 0", f, code, ok)
	}
	if took := time.Since(start); took > 3*mounterLockTry {
		t.Errorf("stopped after %s", took)
	}
}
