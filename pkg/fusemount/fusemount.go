// Package fusemount performs the privileged half of a FUSE mount: it opens /dev/fuse and
// mounts a target directory with that descriptor, so the unprivileged sidecar can serve the
// file system without CAP_SYS_ADMIN. It also unmounts, bounded in time, including when the
// server has died (a plain stat of such a mount fails with ENOTCONN, so checks here read
// /proc/self/mountinfo instead of stat'ing the path).
package fusemount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/backoff"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// FSType is the file system type our mounts carry in mountinfo ("fuse.gcsfuse").
const FSType = "fuse.gcsfuse"

// Options are the kernel-level options of one mount.
type Options struct {
	// Source is shown as the mount source (the bucket name).
	Source   string
	ReadOnly bool
	NoExec   bool
	NoAtime  bool
	// UserID and GroupID own the connection; allow_other lets every pod user in and
	// default_permissions makes the kernel check the modes gcsfuse reports.
	UserID, GroupID int
}

// Mount opens /dev/fuse and mounts target with it. The returned file is the FUSE connection:
// whoever reads it serves the mount. Target is opened with O_NOFOLLOW and mounted through
// /proc/self/fd, so a symlink swapped in at the last element is refused.
func Mount(target string, o Options) (*os.File, error) {
	tfd, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open mount target %s: %w", target, err)
	}
	defer unix.Close(tfd)

	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if o.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	if o.NoExec {
		flags |= unix.MS_NOEXEC
	}
	if o.NoAtime {
		flags |= unix.MS_NOATIME
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other,default_permissions",
		fuse.Fd(), o.UserID, o.GroupID)
	src := o.Source
	if src == "" {
		src = "gcsfuse"
	}
	if err := unix.Mount(src, "/proc/self/fd/"+strconv.Itoa(tfd), FSType, flags, data); err != nil {
		fuse.Close()
		return nil, fmt.Errorf("mount %s (%s): %w", target, data, err)
	}
	return fuse, nil
}

// Info describes an existing mount at a path.
type Info struct {
	FSType   string
	Source   string
	ReadOnly bool
	// Major and Minor are the mount's device: a bind mount has its source's, which is how
	// the mounts of one shared FUSE connection are found again after a restart.
	Major, Minor int
}

// at selects every mount whose mount point is exactly path, the whole stack of them in the
// order they were mounted (mountinfo.SingleEntryFilter stops at the first: the bottom).
func at(path string) mountinfo.FilterFunc {
	return func(m *mountinfo.Info) (skip, stop bool) { return m.Mountpoint != path, false }
}

// top is the top of a stack of mounts at one path: the one no other is mounted on (the
// others are each the parent of the one above).
func top(mounts []*mountinfo.Info) *mountinfo.Info {
	under := make(map[int]bool, len(mounts))
	for _, m := range mounts {
		under[m.Parent] = true
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if !under[mounts[i].ID] {
			return mounts[i]
		}
	}
	return mounts[len(mounts)-1]
}

// Depth is the number of mounts stacked at path (0: not a mount point).
func Depth(path string) (int, error) {
	mounts, err := mountinfo.GetMounts(at(filepath.Clean(path)))
	if err != nil {
		return 0, fmt.Errorf("read mountinfo for %s: %w", path, err)
	}
	return len(mounts), nil
}

// UnmountTop removes the top mount at target alone, lazily if it is busy: a mount just
// stacked on a dead one that cannot be served is taken off, and the dead one stays, so
// that the target is never a bare directory a new container could bind.
func UnmountTop(target string) error {
	err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(target, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("unmount the top mount of %s: %w", target, err)
	}
	return nil
}

// Lookup returns the mount whose mount point is exactly path (the top one of a stack), or
// nil if there is none.
func Lookup(path string) (*Info, error) {
	path = filepath.Clean(path)
	mounts, err := mountinfo.GetMounts(at(path))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo for %s: %w", path, err)
	}
	if len(mounts) == 0 {
		return nil, nil
	}
	m := top(mounts) // the top of a stack of mounts is what callers see
	ro := false
	for _, opt := range strings.Split(m.Options, ",") {
		ro = ro || opt == "ro"
	}
	return &Info{FSType: m.FSType, Source: m.Source, ReadOnly: ro, Major: m.Major, Minor: m.Minor}, nil
}

// Bind bind-mounts source on target, both opened with O_NOFOLLOW and mounted through
// /proc/self/fd, so a symlink swapped in at either last element is refused. The bind shares
// source's FUSE connection: every file operation on target is served by source's server.
func Bind(source, target string) error {
	sfd, err := unix.Open(source, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open bind source %s: %w", source, err)
	}
	defer unix.Close(sfd)
	tfd, err := unix.Open(target, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open bind target %s: %w", target, err)
	}
	defer unix.Close(tfd)
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(sfd), "/proc/self/fd/"+strconv.Itoa(tfd), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", source, target, err)
	}
	return nil
}

// MountsOfDevice lists the mount points below dir whose device is major:minor, that is the
// bind mounts of one FUSE connection.
func MountsOfDevice(dir string, major, minor int) ([]string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Clean(dir)))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo under %s: %w", dir, err)
	}
	var out []string
	for _, m := range mounts {
		if m.Major == major && m.Minor == minor {
			out = append(out, m.Mountpoint)
		}
	}
	return out, nil
}

// Unmount removes the mount at target, and any mounts stacked on it. A busy mount is
// retried until the deadline and then detached lazily, which keeps open files working
// until they are closed and never blocks. A path that is not mounted is not an error.
func Unmount(ctx context.Context, target string, busyWait time.Duration) error {
	return unmount(ctx, target, busyWait, sysOps)
}

// Bounds on Unmount's loop, so that a mount table it cannot empty ends in an error.
const (
	// maxStackedMounts bounds the mounts removed from one target (each umount(2) takes
	// the top one off). Real stacks are one or two deep; more means the table does not
	// change when we unmount.
	maxStackedMounts = 16
	// maxStaleAnswers bounds the umount(2) calls that answer EINVAL or ENOENT while the
	// mount table still lists the target. One such answer can be a race with another
	// unmount; repeated ones mean a stale entry or a mount in another mount namespace,
	// which no retry from here removes.
	maxStaleAnswers = 3
	// unmountFirstBackoff and unmountMaxBackoff pace the retries of a busy mount.
	unmountFirstBackoff = 10 * time.Millisecond
	unmountMaxBackoff   = 200 * time.Millisecond
)

// ops are the system calls unmount makes; tests replace them to reach states a real
// kernel only shows on a broken node.
type ops struct {
	lookup  func(path string) (*Info, error)
	unmount func(target string, flags int) error
}

var sysOps = ops{lookup: Lookup, unmount: unix.Unmount}

// unmount is Unmount with its system calls given. Every turn of its loop either removes a
// mount (at most maxStackedMounts), gets a stale answer (at most maxStaleAnswers), waits
// for a busy mount (until busyWait is over or ctx ends) or returns.
func unmount(ctx context.Context, target string, busyWait time.Duration, o ops) error {
	deadline := time.Now().Add(busyWait)
	pace := backoff.Doubling(unmountFirstBackoff, unmountMaxBackoff)
	removed, stale := 0, 0
	for {
		m, err := o.lookup(target)
		if err != nil {
			return err
		}
		if m == nil {
			return nil
		}
		if removed >= maxStackedMounts {
			return fmt.Errorf("unmount %s: still mounted after %d unmounts (the mount table does not change)", target, removed)
		}
		err = o.unmount(target, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			removed++ // look again: mounts may be stacked
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			// Not a mount point to the kernel, yet listed: another unmount may just have
			// won the race (look again), or the entry is one we cannot remove.
			stale++
			if stale >= maxStaleAnswers {
				return fmt.Errorf("unmount %s: the mount table lists it but umount answers %w %d times "+
					"(a stale entry, or a mount in another mount namespace)", target, err, stale)
			}
		case errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) && ctx.Err() == nil:
			t := time.NewTimer(pace.Step())
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		case errors.Is(err, unix.EBUSY):
			if err := o.unmount(target, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("lazy unmount of busy %s: %w", target, err)
			}
			removed++
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
}

// MountsUnder lists mount points at or below dir.
func MountsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(filepath.Clean(dir)))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo under %s: %w", dir, err)
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// bdiRoot is where the kernel lists backing devices; a FUSE mount has its own, named after
// its anonymous device ("0:53").
const bdiRoot = "/sys/class/bdi"

// SetReadAhead sets the kernel read-ahead of the mount at target to kb KiB, on the mount's
// backing device (its major:minor from mountinfo: stat'ing a FUSE mount point would wait for
// the FUSE server, which may not run yet).
func SetReadAhead(target string, kb int) error {
	target = filepath.Clean(target)
	mounts, err := mountinfo.GetMounts(at(target))
	if err != nil {
		return fmt.Errorf("read mountinfo for %s: %w", target, err)
	}
	if len(mounts) == 0 {
		return fmt.Errorf("set read-ahead: %s is not mounted", target)
	}
	m := top(mounts)
	file := filepath.Join(bdiRoot, fmt.Sprintf("%d:%d", m.Major, m.Minor), "read_ahead_kb")
	f, err := os.OpenFile(file, os.O_WRONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("set read-ahead of %s: %w", target, err)
	}
	_, werr := f.WriteString(strconv.Itoa(kb))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("set read-ahead of %s to %d KiB: %w", target, kb, werr)
	}
	return nil
}
