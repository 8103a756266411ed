package sidecar

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	// minGcsfuseMemoryLimit is the least Config.GcsfuseMemoryLimit: gcsfuse's data segment
	// at rest is ~88 MiB (its Go heap, arenas and runtime; RSS ~41 MiB), so less would fail
	// every start (at 64 MiB: "out of memory allocating heap arena map").
	minGcsfuseMemoryLimit = 128 << 20
	// gcsfuseSoftMemoryShare is GOMEMLIMIT's share of the hard limit, in percent: the Go
	// collector keeps the heap under it while it can, and only a heap that outgrows it
	// meets the hard limit.
	gcsfuseSoftMemoryShare = 80
)

// memoryUnits are the binary suffixes ParseMemory reads, as Kubernetes quantities spell them.
var memoryUnits = []struct {
	suffix string
	shift  uint
}{{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}}

// ParseMemory reads a memory size as the chart writes it: bytes, or a whole number of Ki, Mi,
// Gi or Ti ("" and "0": none).
func ParseMemory(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	num, shift := s, uint(0)
	for _, u := range memoryUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("memory size %q: want a whole number of bytes, Ki, Mi, Gi or Ti (e.g. 512Mi)", s)
	}
	return n << shift, nil
}

// memoryEnv is gcsfuse's GOMEMLIMIT for a hard limit of limit bytes (none for 0).
func memoryEnv(limit int64) []string {
	if limit == 0 {
		return nil
	}
	return []string{"GOMEMLIMIT=" + strconv.FormatInt(limit/100*gcsfuseSoftMemoryShare, 10) + "B"}
}

// limitMemory sets a started gcsfuse's RLIMIT_DATA (soft and hard) to limit bytes. Lowering
// another process's limits needs no privilege when it runs as our user, which gcsfuse does.
// gcsfuse's first allocations may precede it: they are its start-up's, well under any limit
// Validate accepts.
func limitMemory(pid int, limit int64) error {
	if limit == 0 {
		return nil
	}
	r := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	if err := unix.Prlimit(pid, unix.RLIMIT_DATA, &r, nil); err != nil {
		return fmt.Errorf("set gcsfuse's memory limit (RLIMIT_DATA %d bytes): %w", limit, err)
	}
	return nil
}

// outOfMemory reports whether a gcsfuse output line is the Go runtime failing an allocation
// ("fatal error: runtime: out of memory", "out of memory allocating heap arena map").
func outOfMemory(line string) bool {
	return strings.Contains(line, "fatal error") && strings.Contains(line, "out of memory")
}

// memoryVerdict explains a gcsfuse that died of its memory limit (oom: the Go runtime said
// "out of memory"), "" otherwise.
func memoryVerdict(limit int64, oom bool) string {
	if limit == 0 || !oom {
		return ""
	}
	return fmt.Sprintf(" (it passed its memory limit of %d MiB, the mounter's --gcsfuse-memory-limit: the chart's mounter.memoryPerKey; the other keys' gcsfuse keep serving)", limit>>20)
}
