// Package procs finds processes by their command line, for tests that must show a process
// was started, or that none was left behind. It imports nothing of this repository, so any
// package's own tests can use it.
package procs

import (
	"os"
	"strconv"
	"strings"
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
