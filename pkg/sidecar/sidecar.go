// Package sidecar is the unprivileged half of the driver: it takes FUSE descriptors that the
// node plugin offers in the pod's emptyDir, runs one gcsfuse per volume on /dev/fd/3,
// supervises them, and ends at the right moment.
//
// When to end (see docs/lifecycle.md):
//   - native sidecar: the kubelet sends SIGTERM only after every regular container has
//     exited, so all files are closed and flushed: kill gcsfuse and exit at once.
//   - legacy sidecar: the node plugin writes the exit file when the workload is done; a
//     SIGTERM (pod deletion, sent to the app at the same time) only starts a drain that keeps
//     every mount serving until the exit file arrives or the grace period nearly runs out.
//   - gcsfuse ending on its own with an error: exit non-zero with the reason in the
//     termination message, so the pod fails visibly instead of hanging on a dead mount.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/dirwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitfile"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fuseerr"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Config configures a Sidecar.
type Config struct {
	// TmpDir is where the gcsfuse-tmp emptyDir is mounted.
	TmpDir string
	// CacheDir is where the gcsfuse-cache volume is mounted, if any.
	CacheDir string
	// BufferDir is where the gcsfuse-buffer volume is mounted, if any: gcsfuse stages
	// writes there (a user may back it with a PVC or a RAM disk).
	BufferDir string
	// GcsfusePath is the gcsfuse binary.
	GcsfusePath string
	// Mode is contract.ModeNative or contract.ModeLegacy.
	Mode string
	// Grace is the pod's terminationGracePeriodSeconds.
	Grace time.Duration
	// TerminationLog receives the reason for a non-zero exit ("" to skip).
	TerminationLog string
	Log            *slog.Logger
	Metrics        *Metrics
}

// Sidecar is one run of the sidecar.
type Sidecar struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	volumes map[string]*volume
	pending map[string]bool // sockets being connected to

	exits   chan exitResult
	stopped chan struct{} // closed when shutdown begins

	// failed holds the reasons of volumes that failed to start and are answered with I/O
	// errors (see degrade); the sidecar then ends with code 1.
	failed   []string
	degraded []*os.File // closed at shutdown, which ends their servers
}

// New returns a Sidecar.
func New(cfg Config) *Sidecar {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Grace <= 0 {
		cfg.Grace = contract.DefaultGraceSeconds * time.Second
	}
	return &Sidecar{cfg: cfg, log: cfg.Log, volumes: map[string]*volume{}, pending: map[string]bool{}, exits: make(chan exitResult, 16), stopped: make(chan struct{})}
}

// drainDeadline is when a legacy sidecar that got SIGTERM stops waiting for the exit file:
// late enough for the app to finish, early enough to stop gcsfuse before the kubelet's
// SIGKILL (which would also work, but without a clean report).
func drainDeadline(grace time.Duration) time.Duration {
	margin := min(max(grace/10, 500*time.Millisecond), 3*time.Second)
	return max(grace-margin, grace/2)
}

// Run serves until the sidecar must end and returns the process exit code. terminate
// delivers SIGTERM/SIGINT.
func (s *Sidecar) Run(ctx context.Context, terminate <-chan os.Signal) int {
	start := time.Now()
	w, err := dirwatch.New()
	if err != nil {
		return s.fail(fmt.Sprintf("cannot watch %s: %v", s.cfg.TmpDir, err))
	}
	defer w.Close()
	if err := w.Add(s.cfg.TmpDir); err != nil {
		return s.fail(fmt.Sprintf("cannot watch %s (is the %s emptyDir mounted?): %v", s.cfg.TmpDir, contract.TmpVolumeName, err))
	}
	tmpDir, err := podpath.OpenDir(s.cfg.TmpDir)
	if err != nil {
		return s.fail(err.Error())
	}
	defer tmpDir.Close()

	var handoffDir *os.File
	defer func() {
		if handoffDir != nil {
			handoffDir.Close()
		}
	}()
	handoffPath := filepath.Join(s.cfg.TmpDir, contract.HandoffDir)
	watchHandoff := func() {
		if handoffDir != nil {
			return
		}
		d, err := podpath.OpenDir(s.cfg.TmpDir, contract.HandoffDir)
		if err != nil {
			return // not created yet: the watch on TmpDir will tell us
		}
		if err := w.Add(handoffPath); err != nil {
			d.Close()
			s.log.Error("cannot watch hand-off directory", "err", err)
			return
		}
		handoffDir = d
		// Sockets created before the watch existed.
		entries, _ := os.ReadDir(handoffPath)
		for _, e := range entries {
			s.attach(ctx, handoffDir, e.Name())
		}
	}
	watchHandoff()
	s.log.Info("sidecar ready", "mode", s.cfg.Mode, "grace", s.cfg.Grace.String(), "uid", os.Getuid(), "startupMs", time.Since(start).Milliseconds())
	if r, err := exitfile.Read(tmpDir); err == nil {
		return s.shutdown("exit file present at start: "+r.Rule, r, 0)
	}

	var drain <-chan time.Time
	var failure string
	for {
		select {
		case ev, ok := <-w.C:
			if !ok {
				return s.shutdown("inotify watcher ended", exitfile.Reason{}, s.fail("inotify watcher ended"))
			}
			switch {
			case ev.Dir == s.cfg.TmpDir && ev.Name == contract.HandoffDir:
				watchHandoff()
			case ev.Dir == s.cfg.TmpDir && ev.Name == contract.ExitFile:
				r, err := exitfile.Read(tmpDir)
				if err != nil {
					s.log.Warn("exit file unreadable; exiting anyway", "err", err)
				}
				return s.shutdown("exit file: "+r.Rule, r, 0)
			case ev.Dir == handoffPath && handoffDir != nil:
				s.attach(ctx, handoffDir, ev.Name)
			}
		case res := <-s.exits:
			s.mu.Lock()
			delete(s.volumes, res.Volume)
			s.mu.Unlock()
			s.cfg.Metrics.gcsfuseExit(res)
			if res.Failure() {
				failure = res.Volume + ": " + res.Reason
				if res.Spare != nil && s.degrade(res.Volume, res.Spare) {
					// The app will meet I/O errors and fail visibly; we end with it.
					s.failed = append(s.failed, failure)
					continue
				}
				return s.shutdown("gcsfuse failed", exitfile.Reason{}, s.fail(failure))
			}
		case sig := <-terminate:
			if s.cfg.Mode == contract.ModeNative {
				// The kubelet signals a native sidecar only after every regular container
				// has exited: nothing can still be writing.
				return s.shutdown("SIGTERM in native mode ("+sig.String()+")", exitfile.Reason{}, 0)
			}
			if drain == nil {
				d := drainDeadline(s.cfg.Grace)
				s.log.Info("SIGTERM in legacy mode: keep serving until the workload is done", "signal", sig.String(), "deadline", d.String())
				t := time.NewTimer(d)
				defer t.Stop()
				drain = t.C
			}
		case <-drain:
			return s.shutdown("grace period nearly over", exitfile.Reason{}, 0)
		case <-ctx.Done():
			return s.shutdown("context ended", exitfile.Reason{}, 0)
		}
	}
}

// attach connects to a hand-off socket in the background; errors are logged and the
// volume's offer stays open for a later attempt.
func (s *Sidecar) attach(ctx context.Context, dir *os.File, name string) {
	if !strings.HasSuffix(name, contract.HandoffSocketSuffix) || strings.HasPrefix(name, ".") {
		return
	}
	vname := strings.TrimSuffix(name, contract.HandoffSocketSuffix)
	s.mu.Lock()
	if s.pending[vname] || s.volumes[vname] != nil {
		s.mu.Unlock()
		return
	}
	s.pending[vname] = true
	s.mu.Unlock()
	received := time.Now()
	go func() { // bounded by receive's deadlines; reports into s.exits via the volume
		defer func() {
			s.mu.Lock()
			delete(s.pending, vname)
			s.mu.Unlock()
		}()
		v, fuse, conn, err := receive(ctx, dir, name)
		if err != nil {
			s.log.Error("hand-off failed", "socket", name, "err", err)
			return
		}
		vol, err := s.start(ctx, v, fuse, conn, received)
		if err != nil {
			reason := "gcsfuse not started: " + err.Error()
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			_ = handoff.SendStatus(conn, &handoff.Status{State: handoff.StateFailed, Message: reason,
				ElapsedMillis: time.Since(received).Milliseconds()})
			conn.Close()
			s.report(exitResult{Volume: vname, Reason: reason, Spare: fuse})
			return
		}
		s.mu.Lock()
		s.volumes[vname] = vol
		s.mu.Unlock()
		select {
		case <-s.stopped: // shutdown began while we were starting: it did not see this one
			vol.kill()
		default:
		}
		go func() { // owned by vol: forwards its end to Run
			<-vol.exited
			s.report(vol.result)
		}()
	}()
}

// degrade answers a volume whose gcsfuse never served with I/O errors, instead of closing
// the descriptor. A closed descriptor leaves a mount that fails even a stat of the mount
// point, so the kubelet cannot create the app container and the pod hangs in
// CreateContainerError; with I/O errors the app starts, fails on its first access, and the
// pod ends. Returns false (and closes spare) when that is not possible.
func (s *Sidecar) degrade(volume string, spare *os.File) bool {
	f, err := fuseerr.Pollable(spare)
	spare.Close()
	if err != nil {
		s.log.Error("cannot answer the failed volume", "volume", volume, "err", err)
		return false
	}
	initDone := make(chan struct{})
	served := make(chan error, 1)
	go func() { // owned by s: ends on unmount or when shutdown closes f
		served <- fuseerr.Serve(f, 500*time.Millisecond, func() { close(initDone) })
	}()
	select {
	case <-initDone:
		s.degraded = append(s.degraded, f)
		s.log.Warn("volume failed to start; answering it with I/O errors so the app fails instead of hanging", "volume", volume)
		return true
	case err := <-served:
		f.Close()
		s.log.Warn("cannot answer the failed volume; its mount fails with ENOTCONN", "volume", volume, "err", err)
		return false
	}
}

func (s *Sidecar) report(r exitResult) {
	select {
	case s.exits <- r:
	case <-s.stopped:
	}
}

// shutdown stops every gcsfuse in parallel, each bounded by a deadline, and returns code.
func (s *Sidecar) shutdown(why string, r exitfile.Reason, code int) int {
	t0 := time.Now()
	s.mu.Lock()
	close(s.stopped)
	vols := make([]*volume, 0, len(s.volumes))
	for _, v := range s.volumes {
		vols = append(vols, v)
	}
	s.mu.Unlock()
	for _, v := range vols {
		v.kill()
	}
	for _, f := range s.degraded {
		f.Close()
	}
	if len(s.failed) > 0 && code == 0 {
		code = s.fail(strings.Join(s.failed, "; "))
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	var stuck []string
	for _, v := range vols {
		select {
		case <-v.exited:
		case <-deadline.C:
			stuck = append(stuck, v.name)
		}
	}
	attrs := []any{"why", why, "volumes", len(vols), "stopMs", time.Since(t0).Milliseconds(), "code", code}
	if r.Message != "" {
		attrs = append(attrs, "reason", r.Message)
	}
	if !r.WorkloadFinishedAt.IsZero() {
		attrs = append(attrs, "sinceWorkloadDoneMs", time.Since(r.WorkloadFinishedAt).Milliseconds())
	}
	if !r.WrittenAt.IsZero() {
		attrs = append(attrs, "sinceExitFileMs", time.Since(r.WrittenAt).Milliseconds())
	}
	if len(stuck) > 0 {
		attrs = append(attrs, "stuck", stuck)
	}
	s.log.Info("sidecar exiting", attrs...)
	s.cfg.Metrics.exited(s.cfg.Mode, r)
	return code
}

// fail records a reason for a non-zero exit in the termination log (the kubelet shows it
// as the container's termination message) and returns the exit code.
func (s *Sidecar) fail(reason string) int {
	s.log.Error("sidecar failing", "reason", reason)
	if s.cfg.TerminationLog != "" {
		if err := os.WriteFile(s.cfg.TerminationLog, []byte(reason), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Debug("cannot write termination log", "err", err)
		}
	}
	return 1
}
