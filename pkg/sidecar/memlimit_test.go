package sidecar

import (
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMemory(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "0": 0, "1048576": 1 << 20, "512Mi": 512 << 20, "2Gi": 2 << 30, "64Ki": 64 << 10} {
		if got, err := ParseMemory(in); err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"512M", "1.5Gi", "-1", "Mi", "lots", "99999999999Ti"} {
		if _, err := ParseMemory(bad); err == nil {
			t.Errorf("ParseMemory(%q) accepted", bad)
		}
	}
}

// The limit lands on the child: a process started with it cannot map more data than it.
func TestLimitMemoryAppliesToTheChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	const limit = 96 << 20
	if err := limitMemory(cmd.Process.Pid, limit); err != nil {
		t.Fatal(err)
	}
	var got unix.Rlimit
	if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_DATA, nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.Cur != limit || got.Max != limit {
		t.Fatalf("the child's RLIMIT_DATA %+v, want %d both", got, limit)
	}
	if err := limitMemory(cmd.Process.Pid, 0); err != nil {
		t.Fatalf("no limit: %v", err)
	}
	if env := memoryEnv(limit); len(env) != 1 || env[0] != "GOMEMLIMIT=80530560B" {
		t.Errorf("GOMEMLIMIT for %d: %v", limit, env)
	}
	if memoryEnv(0) != nil {
		t.Error("GOMEMLIMIT without a limit")
	}
}

// A gcsfuse that died of its limit says so, naming the limit and the chart value; the
// runtime's words are recognised in both its forms.
func TestMemoryVerdict(t *testing.T) {
	for _, line := range []string{"fatal error: runtime: out of memory", "fatal error: out of memory allocating heap arena map"} {
		if !outOfMemory(line) {
			t.Errorf("%q not taken as out of memory", line)
		}
	}
	if outOfMemory("internal/fs/wrappers/error_mapping.go:45") {
		t.Error("a stack line taken as out of memory")
	}
	v := memoryVerdict(256<<20, true)
	for _, want := range []string{"256 MiB", "mounter.memoryPerKey", "other keys"} {
		if !strings.Contains(v, want) {
			t.Errorf("verdict lacks %q: %s", want, v)
		}
	}
	if memoryVerdict(0, true) != "" || memoryVerdict(256<<20, false) != "" {
		t.Error("a verdict without a limit, or without the runtime's words")
	}
}
