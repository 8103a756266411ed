package podfiles

import (
	"errors"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// The sidecar listens (replacing a predecessor's socket) and the node plugin dials, both on
// pinned descriptors; a symlink planted under the name is never dialed.
func TestMetricsSocket(t *testing.T) {
	tmp, p := dirtest.Pinned(t)
	deadline := time.Now().Add(5 * time.Second)
	if _, err := DialMetrics(tmp, deadline); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("DialMetrics without a sidecar: %v, want ErrNotExist", err)
	}
	if err := os.WriteFile(At(p).MetricsSocket(), nil, 0o600); err != nil { // a predecessor's leftover
		t.Fatal(err)
	}
	ln, err := ListenMetrics(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte("ok"))
		c.Close()
	}()
	conn, err := DialMetrics(tmp, deadline)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(conn)
	conn.Close()
	if string(b) != "ok" {
		t.Fatalf("read %q over the metrics socket", b)
	}
	if err := RemoveMetricsSocket(tmp); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(At(p).MetricsSocket()); !os.IsNotExist(err) {
		t.Fatalf("metrics socket left: %v", err)
	}
	if err := RemoveMetricsSocket(tmp); err != nil {
		t.Fatalf("removing a missing socket: %v", err)
	}

	// A socket elsewhere, symlinked under the name by a container of the pod.
	elsewhere := At(t.TempDir()).MetricsSocket()
	other, err := net.Listen("unix", elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := os.Symlink(elsewhere, At(p).MetricsSocket()); err != nil {
		t.Fatal(err)
	}
	if c, err := DialMetrics(tmp, deadline); err == nil {
		c.Close()
		t.Fatal("DialMetrics followed a symlink")
	}
}
