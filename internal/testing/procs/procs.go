// Package procs finds processes by their command line, and mounts in every process's mount
// namespace, for tests that must show a process or a mount was made, or that none was left
// behind. It imports nothing of this repository, so any
// package's own tests can use it.
package procs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
)

// PIDs returns the processes whose argument list (from /proc/<pid>/cmdline) match accepts.
func PIDs(match func(args []string) bool) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if args := Args(pid); args != nil && match(args) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Args is the argument list of process pid (/proc/<pid>/cmdline), nil when it has ended or
// has none (a kernel thread).
func Args(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// MountsOfSource lists, in every mount namespace of this host (one process of each read),
// the mounts whose source is source, as "<mount point> (pid <pid> <comm>)". A mount left in
// one container's namespace after the host's is gone (a copy a recursive bind made, which
// no unmount reaches) is invisible in /proc/self/mountinfo: this is how tests see it. A
// namespace that cannot be read (not root) is an error, never a namespace without mounts;
// a process that ended meanwhile is skipped, and so is an init that refuses root.
func MountsOfSource(source string) ([]string, error) {
	var out []string
	var unreadable []string
	seen := map[string]bool{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		ns, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt")
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue
		}
		if e.Name() == "1" && errors.Is(err, fs.ErrPermission) {
			// Some machines' init refuses even root (a sandbox's); the driver's mounts are
			// never made in its namespace, which, if the host's, is read through any other
			// process of it.
			continue
		}
		if err != nil {
			unreadable = append(unreadable, e.Name()+": "+err.Error())
			continue
		}
		if seen[ns] {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/mountinfo")
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue
		}
		if err != nil {
			unreadable = append(unreadable, e.Name()+": "+err.Error())
			continue
		}
		mounts, err := mountinfo.GetMountsFromReader(f, func(m *mountinfo.Info) (bool, bool) { return m.Source != source, false })
		f.Close()
		if err != nil {
			continue // the process ended while it was read
		}
		seen[ns] = true
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		for _, m := range mounts {
			out = append(out, m.Mountpoint+" (pid "+e.Name()+" "+strings.TrimSpace(string(comm))+")")
		}
	}
	if len(unreadable) > 0 {
		return out, fmt.Errorf("%d processes' mount namespaces not readable (run as root), e.g. %s", len(unreadable), unreadable[0])
	}
	return out, nil
}
