package sidecar

import (
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// A gcsfuse OOM-killed before it served (a memory limit below its start-up) fails its volume
// saying so, as one killed later does: "failed to start (signal: killed (OOM-killed: ...))".
func TestOOMKilledWhileStartingSaysSo(t *testing.T) {
	dir := t.TempDir()
	v1 := filepath.Join(dir, "memory.oom_control")
	old := oomFiles
	oomFiles = []string{v1}
	t.Cleanup(func() { oomFiles = old })
	if err := os.WriteFile(v1, []byte("oom_kill 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(v1, []byte("oom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	err := cmd.Wait()
	fds, err2 := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err2 != nil {
		t.Fatal(err2)
	}
	conns := make([]*net.UnixConn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	vol := &volume{name: "data", bucket: "b", log: slog.New(slog.NewTextHandler(io.Discard, nil)), started: time.Now(), oomBaseOK: true, conn: conns[0]}
	vol.finish(err)
	if r := vol.result.Reason; !strings.Contains(r, "failed to start") || !strings.Contains(r, "OOM-killed") || !strings.Contains(r, contract.AnnotationMemoryLimit) {
		t.Fatalf("reason %q: want a start failure that says OOM-killed and names %s", r, contract.AnnotationMemoryLimit)
	}
}
