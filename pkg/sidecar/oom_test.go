package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// A gcsfuse SIGKILLed while the container's cgroup counted an OOM kill is reported as
// OOM-killed, naming the annotation that raises the limit; without a new OOM kill it is not.
func TestOOMVerdictFromCgroupCounter(t *testing.T) {
	dir := t.TempDir()
	v2 := filepath.Join(dir, "memory.events")
	v1 := filepath.Join(dir, "memory.oom_control")
	old := oomFiles
	oomFiles = []string{v2, v1}
	t.Cleanup(func() { oomFiles = old })

	if got := oomVerdict(0, false); got != " (OOM kill?)" {
		t.Errorf("no cgroup file: %q", got)
	}
	// cgroup v1, as on the local cluster.
	if err := os.WriteFile(v1, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, ok := oomKills()
	if !ok || base != 2 {
		t.Fatalf("oomKills = %d, %v; want 2, true", base, ok)
	}
	if got := oomVerdict(base, ok); !strings.Contains(got, "not by the container's OOM killer") {
		t.Errorf("no new OOM kill: %q", got)
	}
	if err := os.WriteFile(v1, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := oomVerdict(base, ok); !strings.Contains(got, "OOM-killed") || !strings.Contains(got, contract.AnnotationMemoryLimit) {
		t.Errorf("new OOM kill: %q", got)
	}
	// cgroup v2 wins when present.
	if err := os.WriteFile(v2, []byte("low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, _ := oomKills(); n != 1 {
		t.Errorf("cgroup v2 count %d, want 1", n)
	}
}
