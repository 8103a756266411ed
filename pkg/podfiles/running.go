package podfiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// runningPoll is how often HoldMounterRunning tries for its lock while the node plugin
// holds it exclusively (removing the directory: a moment).
const runningPoll = 50 * time.Millisecond

// HoldMounterRunning takes the running mounter's shared lock on MounterRunningFile in dir
// (created if missing, never through a symlink), waiting at most wait for a node plugin that
// holds it exclusively. The lock lasts as long as the returned file is open: the mounter
// keeps it for its life. It then checks that dir is still linked: a node plugin that took
// the lock first removed the directory, and a mounter left in it would take offers nobody
// can send (ErrDirRemoved: exit, and the kubelet starts it again in the recreated one).
func HoldMounterRunning(dir *os.File, wait time.Duration) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), MounterRunningFile, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: filepath.Join(dir.Name(), MounterRunningFile), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), MounterRunningFile))
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		time.Sleep(runningPoll)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: dir.Name(), Err: err}
	}
	if st.Nlink == 0 {
		f.Close()
		return nil, fmt.Errorf("%s: %w", dir.Name(), ErrDirRemoved)
	}
	return f, nil
}

// ErrDirRemoved: the mounter's directory was removed under it (the node plugin cleaned the
// shared directory up while no mounter ran).
var ErrDirRemoved = errors.New("the mounter's directory was removed by the node plugin while no mounter ran; it is made again when the node plugin starts")

// LockMounterGone takes MounterRunningFile in dir exclusively, without waiting: it succeeds
// only while no mounter runs, and a mounter starting meanwhile waits for unlock
// (HoldMounterRunning) and then finds its directory gone if it was removed. ok is false
// while a mounter runs; unlock must be called when ok.
func LockMounterGone(dir *os.File) (ok bool, unlock func(), err error) {
	fd, err := unix.Openat(int(dir.Fd()), MounterRunningFile, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return false, nil, &os.PathError{Op: "openat", Path: filepath.Join(dir.Name(), MounterRunningFile), Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), MounterRunningFile))
	switch err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		return true, func() { f.Close() }, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return false, nil, nil
	default:
		f.Close()
		return false, nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
}
