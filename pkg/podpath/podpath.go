// Package podpath does file operations inside a pod's volume directories without following
// symlinks. Those directories are writable by the pod's containers, which may be hostile: a
// path resolved by name could be swapped for a symlink to a host path between our check and
// our use. So every operation starts from a directory descriptor opened element by element
// with O_NOFOLLOW, and names inside it are single path elements.
package podpath

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ValidElement reports whether s can be one element of a path: not empty, not "." or "..",
// no "/" or NUL, at most 255 bytes.
func ValidElement(s string) bool { return validElement(s) }

func validElement(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= 255 && !strings.ContainsAny(s, "/\x00")
}

// OpenDir opens root (a trusted, administrator-given path) and then each element below it
// with O_NOFOLLOW, so no element can be a symlink.
func OpenDir(root string, elems ...string) (*os.File, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	path := root
	for _, el := range elems {
		if !validElement(el) {
			unix.Close(fd)
			return nil, fmt.Errorf("invalid path element %q under %s", el, path)
		}
		next, err := unix.Openat(fd, el, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		path = filepath.Join(path, el)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return nil, fmt.Errorf("%s is not a directory (a symlink?): %w", path, err)
			}
			return nil, &os.PathError{Op: "openat", Path: path, Err: err}
		}
		fd = next
	}
	return os.NewFile(uintptr(fd), path), nil
}

// MkdirOpen creates name inside dir if missing and opens it without following symlinks.
func MkdirOpen(dir *os.File, name string, mode uint32) (*os.File, error) {
	if !validElement(name) {
		return nil, fmt.Errorf("invalid directory name %q", name)
	}
	if err := unix.Mkdirat(int(dir.Fd()), name, mode); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, &os.PathError{Op: "mkdirat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s without following symlinks: %w", filepath.Join(dir.Name(), name), err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

// OpenSub opens the directory name inside dir without following a symlink. An error
// wrapping os.ErrNotExist means there is none.
func OpenSub(dir *os.File, name string) (*os.File, error) {
	if !validElement(name) {
		return nil, fmt.Errorf("invalid directory name %q", name)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

// RemoveDir removes the empty directory name inside dir (a symlink there is not followed:
// rmdir of a symlink fails).
func RemoveDir(dir *os.File, name string) error {
	if !validElement(name) {
		return fmt.Errorf("invalid directory name %q", name)
	}
	if err := unix.Unlinkat(int(dir.Fd()), name, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "rmdir", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return nil
}

// SameFile reports whether name inside dir is a regular file (not a symlink) owned by
// uid/gid with mode that holds exactly data.
func SameFile(dir *os.File, name string, data []byte, mode uint32, uid, gid int) (bool, error) {
	if !validElement(name) {
		return false, fmt.Errorf("invalid file name %q", name)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return false, &os.PathError{Op: "openat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != uid || int(st.Gid) != gid || st.Mode&0o7777 != mode || st.Size != int64(len(data)) {
		return false, nil
	}
	buf := make([]byte, len(data)+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, err
	}
	return n == len(data) && string(buf[:n]) == string(data), nil
}

// ProcPath returns a path that reaches name inside dir through /proc/self/fd. It lets calls
// that only take a path (bind(2) of a unix socket, mount(2)) act on the pinned directory, and
// it stays short: a kubelet pod path can exceed the 108-byte unix socket path limit.
func ProcPath(dir *os.File, name string) string {
	p := "/proc/self/fd/" + strconv.Itoa(int(dir.Fd()))
	if name != "" {
		p += "/" + name
	}
	return p
}

// Remove unlinks name inside dir; a missing name is not an error.
func Remove(dir *os.File, name string) error {
	if !validElement(name) {
		return fmt.Errorf("invalid file name %q", name)
	}
	if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "unlinkat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return nil
}

// Rename moves the name from inside dir to the name to inside the same dir, replacing to
// atomically if it exists. Both are single path elements resolved from the pinned dir, so a
// symlink planted in the path cannot redirect the move; a symlink at either name is moved or
// replaced itself, never followed.
func Rename(dir *os.File, from, to string) error {
	if !validElement(from) || !validElement(to) {
		return fmt.Errorf("invalid file name %q or %q", from, to)
	}
	if err := unix.Renameat(int(dir.Fd()), from, int(dir.Fd()), to); err != nil {
		return &os.LinkError{Op: "renameat", Old: filepath.Join(dir.Name(), from), New: filepath.Join(dir.Name(), to), Err: err}
	}
	return nil
}

// Chown changes the owner of name inside dir without following a symlink.
func Chown(dir *os.File, name string, uid, gid int) error {
	if err := unix.Fchownat(int(dir.Fd()), name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "fchownat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return nil
}

// Chmod sets the mode of name inside dir without following a symlink: Linux's fchmodat
// ignores AT_SYMLINK_NOFOLLOW (before fchmodat2), so name is pinned first with O_PATH and
// O_NOFOLLOW, a symlink there is refused, and the mode is set on the pinned inode through
// its /proc/self/fd entry.
func Chmod(dir *os.File, name string, mode uint32) error {
	if !validElement(name) {
		return fmt.Errorf("invalid file name %q", name)
	}
	path := filepath.Join(dir.Name(), name)
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "openat", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return &os.PathError{Op: "chmod", Path: path, Err: unix.ELOOP}
	}
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode); err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}

// Temp file naming for WriteFileAtomic.
const (
	// tempRandomBytes is the random part of a temp name (hex-encoded): enough that two
	// writers, in this process or another, practically never pick the same name.
	tempRandomBytes = 8
	// maxTempAttempts bounds the names tried when a random name is taken, as
	// os.CreateTemp does; a collision is already improbable, several in a row mean
	// something else (a full directory) is wrong.
	maxTempAttempts = 16
)

// WriteFileAtomic writes data to name inside dir through a temp file and a rename, so a
// reader that wakes on the name never sees a partial file. It never follows a symlink: the
// temp file is created with O_EXCL|O_NOFOLLOW and the rename replaces the name itself.
//
// Each call has its own temp file, "."+name+".tmp"+random, so concurrent writers of one
// name (goroutines of one process, or processes sharing the directory) never write into,
// rename or delete each other's temp file: the last rename wins with one complete content.
// The leading "." makes the sidecar ignore temp files; a failed call removes its own.
func WriteFileAtomic(dir *os.File, name string, data []byte, mode uint32) error {
	return writeFileAtomic(dir, name, data, mode, nil)
}

// WriteFileAtomicOwned is WriteFileAtomic for a file that must belong to uid/gid from the
// moment it appears under its name: the temp file is chowned and its mode set (fchown,
// fchmod on the descriptor, so the umask cannot widen it) before the rename.
func WriteFileAtomicOwned(dir *os.File, name string, data []byte, mode uint32, uid, gid int) error {
	return writeFileAtomic(dir, name, data, mode, func(f *os.File) error {
		if err := unix.Fchown(int(f.Fd()), uid, gid); err != nil {
			return fmt.Errorf("fchown: %w", err)
		}
		if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
			return fmt.Errorf("fchmod: %w", err)
		}
		return nil
	})
}

func writeFileAtomic(dir *os.File, name string, data []byte, mode uint32, prepare func(*os.File) error) error {
	if !validElement(name) {
		return fmt.Errorf("invalid file name %q", name)
	}
	f, tmp, err := createTemp(dir, name, mode)
	if err != nil {
		return err
	}
	var werr error
	if prepare != nil {
		werr = prepare(f)
	}
	if werr == nil {
		_, werr = f.Write(data)
	}
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), tmp, 0)
		return fmt.Errorf("write %s: %w", filepath.Join(dir.Name(), name), err)
	}
	if err := unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), name); err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), tmp, 0)
		return &os.PathError{Op: "renameat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return nil
}

// createTemp creates a new file "."+name+".tmp"+random inside dir with O_EXCL|O_NOFOLLOW
// and returns it with its name.
func createTemp(dir *os.File, name string, mode uint32) (*os.File, string, error) {
	var lastErr error
	for i := 0; i < maxTempAttempts; i++ {
		var rnd [tempRandomBytes]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, "", fmt.Errorf("temp name for %s: %w", filepath.Join(dir.Name(), name), err)
		}
		tmp := "." + name + ".tmp" + hex.EncodeToString(rnd[:])
		fd, err := unix.Openat(int(dir.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if err == nil {
			return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), tmp)), tmp, nil
		}
		lastErr = &os.PathError{Op: "create", Path: filepath.Join(dir.Name(), tmp), Err: err}
		if !errors.Is(err, unix.EEXIST) {
			return nil, "", lastErr
		}
	}
	return nil, "", fmt.Errorf("no free temp name for %s after %d attempts: %w", filepath.Join(dir.Name(), name), maxTempAttempts, lastErr)
}

// OwnedDir creates name inside dir if missing, opens it without following symlinks, and
// makes it a directory of uid/gid with mode: the files the node plugin puts there for the
// sidecar are then readable by the sidecar alone. An existing directory owned by anyone
// but root or uid was made by someone else (a container of the pod may write the parent):
// it is refused rather than trusted.
func OwnedDir(dir *os.File, name string, mode uint32, uid, gid int) (*os.File, error) {
	d, err := MkdirOpen(dir, name, mode)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		d.Close()
		return nil, &os.PathError{Op: "fstat", Path: d.Name(), Err: err}
	}
	if st.Uid != 0 && int(st.Uid) != uid {
		d.Close()
		return nil, fmt.Errorf("%s is owned by uid %d, not root or %d: refusing to use it", d.Name(), st.Uid, uid)
	}
	if err := unix.Fchown(int(d.Fd()), uid, gid); err != nil {
		d.Close()
		return nil, &os.PathError{Op: "fchown", Path: d.Name(), Err: err}
	}
	if err := unix.Fchmod(int(d.Fd()), mode); err != nil {
		d.Close()
		return nil, &os.PathError{Op: "fchmod", Path: d.Name(), Err: err}
	}
	return d, nil
}

// Exists reports whether name exists inside dir, without following a symlink (a symlink
// counts as existing). Errors other than "does not exist" are returned.
func Exists(dir *os.File, name string) (bool, error) {
	if !validElement(name) {
		return false, fmt.Errorf("invalid file name %q", name)
	}
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, &os.PathError{Op: "fstatat", Path: filepath.Join(dir.Name(), name), Err: err}
}

// ReadFile reads name inside dir without following a symlink, at most limit bytes.
func ReadFile(dir *os.File, name string, limit int64) ([]byte, error) {
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", filepath.Join(dir.Name(), name))
	}
	buf := make([]byte, limit)
	n, err := f.Read(buf)
	if err != nil && n == 0 && st.Size() > 0 {
		return nil, err
	}
	return buf[:n], nil
}

// DialUnix connects to the unix socket name inside dir without following a symlink: the
// socket is opened with O_PATH|O_NOFOLLOW, checked to be a socket, and connected to through
// that descriptor's /proc/self/fd link, so a name swapped for a symlink (to a host socket)
// after the check is never reached. The connection ends at deadline.
func DialUnix(dir *os.File, name string, deadline time.Time) (net.Conn, error) {
	if !validElement(name) {
		return nil, fmt.Errorf("invalid socket name %q", name)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket", filepath.Join(dir.Name(), name))
	}
	d := net.Dialer{Deadline: deadline}
	conn, err := d.Dial("unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		return nil, err
	}
	if err := conn.SetDeadline(deadline); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}
