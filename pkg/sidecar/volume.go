package sidecar

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// readyMarker is what gcsfuse logs once it has answered the kernel's INIT: from then on the
// mount serves.
const readyMarker = "successfully mounted"

// volume is one gcsfuse process serving one hand-off.
type volume struct {
	name    string
	cmd     *exec.Cmd
	started time.Time

	mu       sync.Mutex
	ready    bool
	killed   bool // we asked it to stop: its exit is not a failure
	lastErrs []string

	// spare is our duplicate of the FUSE descriptor until gcsfuse is ready: if gcsfuse
	// fails before that, the sidecar answers the mount with I/O errors through it.
	spare *os.File

	exited chan struct{} // closed when the process has been reaped
	result exitResult
}

// exitResult is how a gcsfuse process ended.
type exitResult struct {
	Volume string
	// Clean is an exit code 0: gcsfuse ends that way when the node plugin unmounts.
	Clean bool
	// Requested is set when the sidecar killed it during shutdown.
	Requested bool
	Reason    string
	// Spare is the FUSE descriptor of a volume whose gcsfuse failed before serving (the
	// kernel's INIT may still be unanswered); the receiver owns it.
	Spare *os.File
}

// Failure reports whether the exit means the volume failed (crash, OOM kill, start error).
func (r exitResult) Failure() bool { return !r.Clean && !r.Requested }

// receive connects to a hand-off socket and takes the volume's descriptor. It retries a
// refused connection briefly: inotify reports the socket at bind(2), a moment before
// listen(2).
func receive(ctx context.Context, handoffDir *os.File, sockName string) (*handoff.Volume, *os.File, *net.UnixConn, error) {
	addr := &net.UnixAddr{Name: podpath.ProcPath(handoffDir, sockName), Net: "unix"}
	deadline := time.Now().Add(3 * time.Second)
	backoff := 2 * time.Millisecond
	var conn *net.UnixConn
	for {
		var err error
		conn, err = net.DialUnix("unix", nil, addr)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil || !(errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)) {
			return nil, nil, nil, fmt.Errorf("connect to hand-off socket %s: %w", sockName, err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 100*time.Millisecond)
	}
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	v, fuse, err := handoff.RecvVolume(conn)
	if err != nil {
		if fuse != nil {
			fuse.Close()
		}
		conn.Close()
		return nil, nil, nil, fmt.Errorf("receive hand-off on %s: %w", sockName, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	if v.VolumeName+contract.HandoffSocketSuffix != sockName {
		fuse.Close()
		conn.Close()
		return nil, nil, nil, fmt.Errorf("hand-off on %s names volume %q", sockName, v.VolumeName)
	}
	// The node plugin already applied the allowlist; apply it again so that nothing else
	// that can write into this emptyDir can smuggle a flag into gcsfuse.
	if err := recheckFlags(v.Flags); err != nil {
		fuse.Close()
		conn.Close()
		return nil, nil, nil, err
	}
	return v, fuse, conn, nil
}

func recheckFlags(flags []string) error {
	opts := make([]string, 0, len(flags))
	for _, f := range flags {
		if !strings.HasPrefix(f, "--") {
			return fmt.Errorf("hand-off flag %q is not a --flag", f)
		}
		opts = append(opts, strings.TrimPrefix(f, "--"))
	}
	res, err := mountopts.Parse(opts)
	if err != nil {
		return fmt.Errorf("hand-off flags refused: %w", err)
	}
	if len(res.Flags) != len(flags) {
		return errors.New("hand-off flags carry kernel options")
	}
	return nil
}

// gcsfuseArgs builds the command line. Driver-owned flags come first and are never taken
// from the hand-off's Flags, which passed the allowlist.
func gcsfuseArgs(v *handoff.Volume, tempDir, cacheDir string) []string {
	args := []string{"--foreground", "--temp-dir=" + tempDir}
	if v.Endpoint != "" {
		args = append(args, "--custom-endpoint="+v.Endpoint, "--anonymous-access")
	}
	if cacheDir != "" && wantsFileCache(v.Flags) {
		args = append(args, "--cache-dir="+cacheDir)
	}
	args = append(args, v.Flags...)
	return append(args, v.Bucket, "/dev/fd/3")
}

func wantsFileCache(flags []string) bool {
	for _, f := range flags {
		if strings.HasPrefix(f, "--file-cache-max-size-mb=") && f != "--file-cache-max-size-mb=0" {
			return true
		}
	}
	return false
}

// start runs gcsfuse for a received volume. The descriptor becomes the child's fd 3; our
// copy is kept as the volume's spare until gcsfuse is ready. On error the caller still owns
// fuse.
func (s *Sidecar) start(ctx context.Context, v *handoff.Volume, fuse *os.File, conn *net.UnixConn, received time.Time) (*volume, error) {
	if v.Endpoint != "" {
		if err := checkBucket(ctx, v.Endpoint, v.Bucket); err != nil {
			return nil, err
		}
	}
	tempDir := filepath.Join(s.cfg.TmpDir, contract.VolumesDir, v.VolumeName, "tmp")
	if s.cfg.BufferDir != "" {
		tempDir = filepath.Join(s.cfg.BufferDir, v.VolumeName)
	}
	if err := os.MkdirAll(tempDir, 0o700); err != nil {
		return nil, fmt.Errorf("create temp dir for %s: %w", v.VolumeName, err)
	}
	cacheDir := ""
	if s.cfg.CacheDir != "" {
		cacheDir = filepath.Join(s.cfg.CacheDir, v.VolumeName)
		if err := os.MkdirAll(cacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("create cache dir for %s: %w", v.VolumeName, err)
		}
	}
	cmd := exec.Command(s.cfg.GcsfusePath, gcsfuseArgs(v, tempDir, cacheDir)...)
	cmd.ExtraFiles = []*os.File{fuse}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tempDir, "HOME=" + tempDir}
	// Pdeathsig: if the sidecar itself is killed, gcsfuse must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("start gcsfuse for %s: %w", v.VolumeName, err)
	}
	vol := &volume{name: v.VolumeName, cmd: cmd, started: received, exited: make(chan struct{}), spare: fuse}
	log := s.log.With("volume", v.VolumeName)
	log.Info("gcsfuse started", "pid", cmd.Process.Pid, "bucket", v.Bucket, "readOnly", v.ReadOnly, "flags", v.Flags)

	var sendMu sync.Mutex
	send := func(st handoff.Status) {
		st.ElapsedMillis = time.Since(received).Milliseconds()
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		if err := handoff.SendStatus(conn, &st); err != nil {
			log.Debug("could not report status to node plugin", "state", st.State, "err", err)
		}
	}
	logsDone := make(chan struct{})
	go func() { // owned by vol: ends when the child's output closes
		defer close(logsDone)
		vol.pump(pr, log, func() {
			log.Info("volume ready", "ms", time.Since(received).Milliseconds())
			send(handoff.Status{State: handoff.StateStarted})
		})
	}()
	go func() { // owned by vol: reaps the child
		err := cmd.Wait()
		pw.Close()
		<-logsDone
		vol.finish(err, send, log)
		conn.Close()
		close(vol.exited)
	}()
	return vol, nil
}

// pump logs the child's output line by line with the volume name and watches for the ready
// marker and error lines.
func (vol *volume) pump(r io.Reader, log *slog.Logger, onReady func()) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		msg, severity := gcsfuseMessage(line)
		log.Info("gcsfuse", "severity", severity, "msg", msg)
		vol.mu.Lock()
		first := !vol.ready && strings.Contains(msg, readyMarker)
		if first {
			vol.ready = true
			// Start-up noise (e.g. an exporter without credentials) is not why a
			// serving gcsfuse later dies.
			vol.lastErrs = nil
			// gcsfuse owns the connection now: if it dies, the mount must fail fast.
			vol.spare.Close()
			vol.spare = nil
		}
		if severity == "ERROR" || strings.Contains(strings.ToLower(msg), "error") {
			vol.lastErrs = append(vol.lastErrs, msg)
			if len(vol.lastErrs) > 3 {
				vol.lastErrs = vol.lastErrs[1:]
			}
		}
		vol.mu.Unlock()
		if first {
			onReady()
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// gcsfuseMessage extracts the message and severity from a gcsfuse JSON log line; other
// lines are returned as they are.
func gcsfuseMessage(line string) (msg, severity string) {
	var j struct {
		Severity string `json:"severity"`
		Message  string `json:"message"`
	}
	if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &j) == nil && j.Message != "" {
		return strings.TrimSpace(j.Message), j.Severity
	}
	return line, ""
}

func (vol *volume) finish(err error, send func(handoff.Status), log *slog.Logger) {
	vol.mu.Lock()
	defer vol.mu.Unlock()
	res := exitResult{Volume: vol.name, Requested: vol.killed, Clean: err == nil}
	how := "exit code 0"
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		how = ee.ProcessState.String() // "exit status 1", "signal: killed"
	} else if err != nil {
		how = err.Error()
	}
	detail := ""
	if len(vol.lastErrs) > 0 {
		detail = ": " + strings.Join(vol.lastErrs, "; ")
	}
	switch {
	case res.Requested:
		res.Reason = "stopped by the sidecar"
	case res.Clean:
		res.Reason = "unmounted"
	case !vol.ready:
		res.Reason = fmt.Sprintf("gcsfuse failed to start (%s)%s", how, detail)
		send(handoff.Status{State: handoff.StateFailed, Message: res.Reason})
	default:
		if ee != nil && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			how += " (OOM kill?)"
		}
		res.Reason = fmt.Sprintf("gcsfuse died (%s)%s", how, detail)
		send(handoff.Status{State: handoff.StateExited, Message: res.Reason})
	}
	if vol.spare != nil {
		if res.Failure() && !vol.ready {
			res.Spare = vol.spare
		} else {
			vol.spare.Close()
		}
		vol.spare = nil
	}
	vol.result = res
	lvl := slog.LevelInfo
	if res.Failure() {
		lvl = slog.LevelError
	}
	log.Log(context.Background(), lvl, "gcsfuse exited", "how", how, "reason", res.Reason, "ranFor", time.Since(vol.started).Round(time.Millisecond).String())
}

// kill stops gcsfuse at once. The workload is done when this is called, and the kernel
// flushes a file through gcsfuse when the process that wrote it closes it or exits, so
// every closed file is already in the bucket; waiting for gcsfuse's own signal handling
// would cost a fixed 30 s.
func (vol *volume) kill() {
	vol.mu.Lock()
	vol.killed = true
	vol.mu.Unlock()
	_ = vol.cmd.Process.Signal(syscall.SIGKILL)
}
