// Package procs finds processes by their command line, and mounts in every process's mount
// namespace, for tests that must show a process or a mount was made, or that none was left
// behind. It imports nothing of this repository, so any
// package's own tests can use it.
package procs

import (
	"os"
	"strconv"
	"strings"

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
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// MountsOfSource lists, in every mount namespace of this host (one process of each read),
// the mounts whose source is source, as "<mount point> (pid <pid> <comm>)". A mount left in
// one container's namespace after the host's is gone (a copy a recursive bind made, which
// no unmount reaches) is invisible in /proc/self/mountinfo: this is how tests see it.
func MountsOfSource(source string) []string {
	var out []string
	seen := map[string]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		ns, err := os.Readlink("/proc/" + e.Name() + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/mountinfo")
		if err != nil {
			continue
		}
		mounts, err := mountinfo.GetMountsFromReader(f, func(m *mountinfo.Info) (bool, bool) { return m.Source != source, false })
		f.Close()
		if err != nil {
			continue
		}
		seen[ns] = true
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		for _, m := range mounts {
			out = append(out, m.Mountpoint+" (pid "+e.Name()+" "+strings.TrimSpace(string(comm))+")")
		}
	}
	return out
}
