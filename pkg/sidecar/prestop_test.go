package sidecar

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle/sidecarrule"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// The preStop hook returns as soon as the exit file appears, not before; without it, at
// the deletion's grace (the terminating file), never under the kubelet's 2 s minimum.
func TestWaitExit(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("exit file written while waiting", func(t *testing.T) {
		dir := t.TempDir()
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		const after = 300 * time.Millisecond
		written := make(chan struct{})
		go func() { // ends after one write; the test waits for it before closing d
			defer close(written)
			time.Sleep(after)
			if err := podfiles.WriteIn(d, podfiles.Reason{Rule: "test"}); err != nil {
				t.Error(err)
			}
		}()
		defer func() { <-written }()
		start := time.Now()
		if err := WaitExit(context.Background(), dir, time.Minute, quiet); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < after || took > after+time.Second {
			t.Fatalf("returned after %s; the exit file came after %s", took, after)
		}
	})
	t.Run("no exit file: the deletion's grace bounds it", func(t *testing.T) {
		dir := t.TempDir()
		d, err := os.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if err := podfiles.WriteTerminating(d, podfiles.Terminating{GraceSeconds: 1}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err = WaitExit(context.Background(), dir, time.Hour, quiet)
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "terminating file") {
			t.Fatalf("err %v, want one naming the grace's source", err)
		}
		if took < sidecarrule.MinKubeletGrace || took > sidecarrule.MinKubeletGrace+time.Second {
			t.Fatalf("returned after %s, want the 2 s minimum (the deletion asked 1 s)", took)
		}
	})
	t.Run("no tmp dir", func(t *testing.T) {
		if err := WaitExit(context.Background(), "/nonexistent/gcsfuse-tmp", time.Second, quiet); err == nil {
			t.Fatal("no error for a missing directory")
		}
	})
}
