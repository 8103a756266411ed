package podfiles

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// runningPoll is how often HoldMounterRunning tries again: while the node plugin has not
// made the directory the mounter's yet (it starts first on a fresh node), or holds the lock
// exclusively (removing the directory: a moment).
const runningPoll = 100 * time.Millisecond

// errNotLockFile: what is under MounterRunningFile is not a lock file (openRunning).
var errNotLockFile = errors.New("not a regular file of root or the mounter with one link")

// ErrDirRemoved: the mounter's directory was removed under it (the node plugin cleaned the
// shared directory up while no mounter ran).
var ErrDirRemoved = errors.New("the mounter's directory was removed by the node plugin while no mounter ran; it is made again when the node plugin starts")

// CreateMounterRunning makes MounterRunningFile in dir (the node plugin, root, when it
// prepares the mounter's directory), so that a mounter needs no write permission to open it.
// Whatever the mounter's user left under that name that is not such a file (a FIFO, a hard
// link, a symlink) is removed first, once.
func CreateMounterRunning(dir *os.File) error {
	f, err := openRunning(dir, unix.O_CREAT)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, errNotLockFile) && !errors.Is(err, unix.ELOOP) { // ELOOP: a symlink
		return err // a file that may well be a running mounter's lock: left alone
	}
	if rerr := unix.Unlinkat(int(dir.Fd()), MounterRunningFile, 0); rerr != nil {
		return fmt.Errorf("%w; and cannot remove it: %v", err, rerr)
	}
	if f, err = openRunning(dir, unix.O_CREAT); err != nil {
		return err
	}
	return f.Close()
}

// openRunning opens MounterRunningFile in dir read-only, never through a symlink, never
// blocking (a FIFO put in its place by the mounter's user answers at once), and checks that
// it is a regular file with one link (not a hard link to a file elsewhere) owned by root or
// by dir's owner, the mounter.
func openRunning(dir *os.File, create int) (*os.File, error) {
	path := filepath.Join(dir.Name(), MounterRunningFile)
	fd, err := unix.Openat(int(dir.Fd()), MounterRunningFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|create, 0o644)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st, dst unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if err := unix.Fstat(int(dir.Fd()), &dst); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "fstat", Path: dir.Name(), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || (st.Uid != 0 && st.Uid != dst.Uid) {
		f.Close()
		return nil, fmt.Errorf("%s (mode %o, links %d, uid %d): %w: refusing to lock it", path, st.Mode, st.Nlink, st.Uid, errNotLockFile)
	}
	return f, nil
}

// HoldMounterRunning takes the running mounter's shared lock on MounterRunningFile in dir,
// trying again for at most wait while it cannot be opened yet (the node plugin, started
// after the mounter on a fresh node, has not made the directory the mounter's) or a node
// plugin holds it exclusively. The lock lasts as long as the returned file is open: the
// mounter keeps it for its life. It then checks that dir is still linked: a node plugin that
// took the lock first removed the directory, and a mounter left in it would wait for offers
// nobody sends (ErrDirRemoved: exit, and the kubelet starts it again in the new one).
func HoldMounterRunning(dir *os.File, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	var f *os.File
	for {
		var err error
		if f == nil {
			f, err = openRunning(dir, unix.O_CREAT)
			if err != nil && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.ENOENT) {
				return nil, err
			}
		}
		if f != nil {
			// Kept open while the lock is busy: once the node plugin's ends, a directory
			// it removed meanwhile is seen through this very file's (linked).
			lerr := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
			if lerr == nil {
				return f, linked(dir, f)
			}
			if !errors.Is(lerr, unix.EWOULDBLOCK) {
				f.Close()
				return nil, fmt.Errorf("lock %s: %w", f.Name(), lerr)
			}
			err = fmt.Errorf("lock %s: %w", f.Name(), lerr)
		} else if gone := linked(dir, nil); gone != nil {
			return nil, gone
		}
		if time.Now().After(deadline) {
			if f != nil {
				f.Close()
			}
			return nil, fmt.Errorf("after %s: %w", wait, err)
		}
		time.Sleep(runningPoll)
	}
}

// linked returns nil when dir still has a name, else closes f (if any) and says why.
func linked(dir, f *os.File) error {
	var st unix.Stat_t
	err := unix.Fstat(int(dir.Fd()), &st)
	switch {
	case err != nil:
		err = &os.PathError{Op: "fstat", Path: dir.Name(), Err: err}
	case st.Nlink == 0:
		err = fmt.Errorf("%s: %w", dir.Name(), ErrDirRemoved)
	default:
		return nil
	}
	if f != nil {
		f.Close()
	}
	return err
}

// LockMounterGone takes MounterRunningFile in dir exclusively, without waiting: it succeeds
// only while no mounter runs, and a mounter starting meanwhile waits for unlock
// (HoldMounterRunning) and then finds its directory gone if it was removed. ok is false
// while a mounter runs; unlock must be called when ok. A file that is not what it should be
// (openRunning) is an error: whether a mounter runs cannot be told.
func LockMounterGone(dir *os.File) (ok bool, unlock func(), err error) {
	// Not created: with none, whether a mounter runs cannot be told (one that holds a file
	// someone unlinked), and the node plugin keeps the directory.
	f, err := openRunning(dir, 0)
	if err != nil {
		return false, nil, err
	}
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
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

// SameMounterRunning reports whether held, a lock file the mounter holds, is still the one
// named MounterRunningFile in dir (same device and inode): one renamed, replaced or unlinked
// is not, and the mounter takes the new one (a node plugin would lock that one).
func SameMounterRunning(dir, held *os.File) bool {
	var named, fst unix.Stat_t
	if unix.Fstatat(int(dir.Fd()), MounterRunningFile, &named, unix.AT_SYMLINK_NOFOLLOW) != nil || unix.Fstat(int(held.Fd()), &fst) != nil {
		return false
	}
	return named.Dev == fst.Dev && named.Ino == fst.Ino
}
