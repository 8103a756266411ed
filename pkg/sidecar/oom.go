package sidecar

import (
	"bufio"
	"bytes"
	"os"
	"strconv"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// oomFiles are where the container's memory cgroup counts OOM kills, as the sidecar sees its
// own cgroup: cgroup v2's memory.events, cgroup v1's memory.oom_control ("oom_kill N" since
// Linux 4.13). The first that has the counter is used. A variable for tests.
var oomFiles = []string{"/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}

// oomKills returns the container's OOM kill count; ok is false when no cgroup file says.
func oomKills() (n int64, ok bool) {
	for _, f := range oomFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			k, v, found := bytes.Cut(sc.Bytes(), []byte(" "))
			if found && string(k) == "oom_kill" {
				if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
					return n, true
				}
			}
		}
	}
	return 0, false
}

// oomVerdict says why a gcsfuse got SIGKILL, given the container's OOM kill count when it
// started (base, baseOK): the container's memory limit when the count grew, else unknown.
func oomVerdict(base int64, baseOK bool) string {
	now, ok := oomKills()
	switch {
	case ok && baseOK && now > base:
		return " (OOM-killed: the sidecar container reached its memory limit; raise it with the pod annotation " +
			contract.AnnotationMemoryLimit + ")"
	case ok && baseOK:
		return " (killed, not by the container's OOM killer)"
	}
	return " (OOM kill?)"
}
