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
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// readyMarker is what gcsfuse logs once it has answered the kernel's INIT: from then on the
// mount serves.
const readyMarker = "successfully mounted"

// volume is one gcsfuse process serving one hand-off.
type volume struct {
	name    string
	bucket  string
	cmd     *exec.Cmd
	started time.Time
	log     *slog.Logger
	// metricsPort is where gcsfuse serves Prometheus metrics (0: not asked to).
	metricsPort int
	// scrub takes a proxy's password out of a line of gcsfuse's output before it is
	// logged or reported.
	scrub func(string) string
	// memoryLimit is gcsfuse's memory limit (Config.GcsfuseMemoryLimit), and outOfMemory
	// says gcsfuse printed the Go runtime's "out of memory" (under mu): the reason of its end.
	memoryLimit int64
	outOfMemory bool
	// oomBase is the container's OOM kill count when gcsfuse started (oom.go).
	oomBase   int64
	oomBaseOK bool

	// conn is the hand-off connection: Status frames to the node plugin go there, one at
	// a time (sendMu). The reaper closes it after the last one.
	conn            *net.UnixConn
	sendMu          sync.Mutex
	terminatingOnce sync.Once

	mu       sync.Mutex
	ready    bool
	killed   bool // we asked it to stop: its exit is not a failure
	lastErrs []string

	// spare is our duplicate of the FUSE descriptor until gcsfuse is ready: if gcsfuse
	// fails before that, the sidecar answers the mount with I/O errors through it.
	// keepSpare keeps it for gcsfuse's whole life (the node's shared mounter): if gcsfuse
	// then dies, the pods that share its mount get I/O errors through it too, their
	// requests in flight included, instead of ENOTCONN.
	spare     *os.File
	keepSpare bool

	exited chan struct{} // closed when the process has been reaped
	result exitResult
}

// exitResult is how a volume ended: its gcsfuse exited, or it could not be served at all.
type exitResult struct {
	Volume string
	Bucket string // "" when a refused hand-off did not say
	// Clean is an exit code 0: gcsfuse ends that way when the node plugin unmounts.
	Clean bool
	// Requested is set when the sidecar killed it during shutdown.
	Requested bool
	Reason    string
	// Spare is the FUSE descriptor of a volume whose gcsfuse failed before serving (the
	// kernel's INIT may still be unanswered), or, with Served, of a shared volume whose
	// gcsfuse died while serving; the receiver owns it.
	Spare  *os.File
	Served bool
	// vol is the volume that ended (nil when gcsfuse never ran), so that Run forgets that
	// one and not a newer volume of the same name.
	vol *volume
}

// Failure reports whether the end means the volume failed (crash, OOM kill, start error,
// refused hand-off).
func (r exitResult) Failure() bool { return !r.Clean && !r.Requested }

// describe is the failure as the termination message and the node plugin's Event show it:
// which volume, which bucket, what happened.
func (r exitResult) describe() string { return describe(r.Volume, r.Bucket) + ": " + r.Reason }

// gcsfuseArgs builds the command line. Driver-owned flags come first and are never taken
// from the hand-off's Flags, which passed the allowlist.
// keyFile is the credential file of a volume with v.KeyFile ("" otherwise).
func gcsfuseArgs(v *handoff.Volume, tempDir, cacheDir, keyFile string) []string {
	args := []string{"--foreground", "--temp-dir=" + tempDir}
	if v.Endpoint != "" {
		args = append(args, "--custom-endpoint="+v.Endpoint)
		if keyFile == "" {
			args = append(args, "--anonymous-access")
		}
	}
	if keyFile != "" {
		args = append(args, "--key-file="+keyFile)
	}
	if cacheDir != "" && mountopts.FlagsWantFileCache(v.Flags) {
		args = append(args, "--cache-dir="+cacheDir)
	}
	args = append(args, v.Flags...)
	return append(args, v.Bucket, "/dev/fd/3")
}

// gcsfuseEnv is gcsfuse's whole environment: nothing of the sidecar's own, its temp dir, and
// the volume's route (proxy variables, SSL_CERT_FILE), which only gcsfuse gets.
func gcsfuseEnv(tempDir string, r *route) []string {
	return append([]string{"PATH=/usr/bin:/bin", "TMPDIR=" + tempDir, "HOME=" + tempDir}, r.env()...)
}

// keyFile is the --key-file volume v's gcsfuse reads (none: the default credentials) and
// the identity it reads as, for messages: the node plugin's per-volume credentials when the
// volume has its own identity, else the pod's credential ConfigMap's configuration, which the
// pod asked for, written where only this user reads it.
func (s *Sidecar) keyFile(v *handoff.Volume) (keyFile, identity string, err error) {
	switch {
	case v.KeyFile:
		return podfiles.At(s.cfg.TmpDir).CredentialsConfigFile(v.VolumeName), v.Identity, nil
	case len(s.cfg.CredentialConfig) > 0:
		paths := podfiles.At(s.cfg.TmpDir)
		if err := os.MkdirAll(paths.VolumeDir(v.VolumeName), 0o700); err != nil {
			return "", "", fmt.Errorf("create the directory of volume %s: %w", v.VolumeName, err)
		}
		keyFile = paths.CredentialConfigMapFile(v.VolumeName)
		if err := writeAtomic(keyFile, s.cfg.CredentialConfig); err != nil {
			return "", "", fmt.Errorf("write the credential configuration of volume %s: %w", v.VolumeName, err)
		}
		return keyFile, "the pod's service account through credential ConfigMap " + s.cfg.CredentialConfigMap, nil
	}
	return "", v.Identity, nil
}

// start runs gcsfuse for a received volume. The descriptor becomes the child's fd 3; our
// copy is kept as the volume's spare until gcsfuse is ready. On error the caller still owns
// fuse and conn; on success the volume owns conn.
func (s *Sidecar) start(ctx context.Context, v *handoff.Volume, fuse *os.File, conn *net.UnixConn, received time.Time) (*volume, error) {
	keyFile, identity, err := s.keyFile(v)
	if err != nil {
		return nil, err
	}
	rt, err := routeFor(v, s.cfg.TmpDir, s.cfg.SystemRoots)
	if err != nil {
		return nil, err
	}
	if v.Endpoint != "" {
		err := checkBucketRetrying(ctx, preflightRetry, s.log.With("volume", v.VolumeName, "bucket", v.Bucket), rt, v.Endpoint, v.Bucket, keyFile, identity)
		rt.close()
		if err != nil {
			return nil, err
		}
	}
	tempDir := podfiles.At(s.cfg.TmpDir).VolumeTempDir(v.VolumeName)
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
	metricsPort := 0
	if !slices.Contains(v.Flags, mountopts.NoMetricsFlag) {
		metricsPort = pickMetricsPort(s.log)
	}
	cmd := exec.Command(s.cfg.GcsfusePath, withMetricsPort(gcsfuseArgs(v, tempDir, cacheDir, keyFile), metricsPort)...)
	cmd.ExtraFiles = []*os.File{fuse}
	cmd.Env = append(gcsfuseEnv(tempDir, rt), memoryEnv(s.cfg.GcsfuseMemoryLimit)...)
	// Pdeathsig: if the sidecar itself is killed, gcsfuse must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("start gcsfuse for %s: %w", v.VolumeName, err)
	}
	log := s.log.With("volume", v.VolumeName, "bucket", v.Bucket)
	if err := limitMemory(cmd.Process.Pid, s.cfg.GcsfuseMemoryLimit); err != nil {
		// Unbounded, this gcsfuse could take the whole container down with it: not started.
		// Nobody reads its output: closing the reader ends exec's copy, so Wait returns.
		pr.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		pw.Close()
		return nil, err
	}
	vol := &volume{name: v.VolumeName, bucket: v.Bucket, cmd: cmd, started: received, log: log, conn: conn,
		exited: make(chan struct{}), spare: fuse, keepSpare: s.cfg.Mode == contract.ModeShared,
		metricsPort: metricsPort, scrub: rt.proxy.Scrub, memoryLimit: s.cfg.GcsfuseMemoryLimit}
	vol.oomBase, vol.oomBaseOK = oomKills()
	log.Info("gcsfuse started", "pid", cmd.Process.Pid, "readOnly", v.ReadOnly, "flags", v.Flags, "identity", identity,
		"proxy", rt.proxy, "caBundle", rt.bundle)

	logsDone := make(chan struct{})
	go func() { // owned by vol: ends when the child's output closes
		defer close(logsDone)
		vol.pump(pr, log, func() {
			log.Info("volume ready", "ms", time.Since(received).Milliseconds())
			vol.send(handoff.Status{State: handoff.StateStarted})
		})
	}()
	go func() { // owned by vol: reaps the child
		err := cmd.Wait()
		pw.Close()
		<-logsDone
		vol.finish(err)
		vol.sendMu.Lock()
		conn.Close()
		vol.sendMu.Unlock()
		close(vol.exited)
	}()
	return vol, nil
}

// hasExited reports whether gcsfuse has exited and its end been reported (its own reason,
// a memory limit's say, must not be replaced by the mounter's stop).
func (vol *volume) hasExited() bool {
	select {
	case <-vol.exited:
		return true
	default:
		return false
	}
}

// send reports a state of this volume to the node plugin (best effort, bounded).
func (vol *volume) send(st handoff.Status) {
	st.ElapsedMillis = time.Since(vol.started).Milliseconds()
	vol.sendMu.Lock()
	defer vol.sendMu.Unlock()
	if err := sendStatus(vol.conn, &st); err != nil {
		vol.log.Debug("could not report status to node plugin", "err", err)
	}
}

// notifyTerminating tells the node plugin, once, that the sidecar is draining.
func (vol *volume) notifyTerminating() {
	vol.terminatingOnce.Do(func() { vol.send(handoff.Status{State: handoff.StateTerminating}) })
}

// pump logs the child's output line by line with the volume name and watches for the ready
// marker and error lines.
func (vol *volume) pump(r io.Reader, log *slog.Logger, onReady func()) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if vol.scrub != nil {
			line = vol.scrub(line)
		}
		msg, severity := gcsfuseMessage(line)
		log.Info("gcsfuse", "severity", severity, "msg", msg)
		vol.mu.Lock()
		first := !vol.ready && strings.Contains(msg, readyMarker)
		if first {
			vol.ready = true
			// Start-up noise (e.g. an exporter without credentials) is not why a
			// serving gcsfuse later dies.
			vol.lastErrs = nil
			// gcsfuse owns the connection now: if it dies, the mount must fail fast
			// (ENOTCONN), unless it is answered with I/O errors in its place.
			if !vol.keepSpare {
				vol.spare.Close()
				vol.spare = nil
			}
		}
		if outOfMemory(msg) {
			// The Go runtime's last words: its stack dump follows, and would push them out
			// of lastErrs.
			vol.outOfMemory = true
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

func (vol *volume) finish(err error) {
	vol.mu.Lock()
	defer vol.mu.Unlock()
	res := exitResult{Volume: vol.name, Bucket: vol.bucket, Requested: vol.killed, Clean: err == nil, vol: vol}
	how := "exit code 0"
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		how = ee.ProcessState.String() // "exit status 1", "signal: killed"
		// A SIGKILL we did not send: say whether the container's memory limit did it, while
		// starting (a limit below gcsfuse's start-up) as well as later.
		if ws, ok := ee.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signal() == syscall.SIGKILL && !res.Requested {
			how += oomVerdict(vol.oomBase, vol.oomBaseOK)
		}
	} else if err != nil {
		how = err.Error()
	}
	switch {
	case res.Requested:
		res.Reason = "stopped by the sidecar"
	case res.Clean:
		res.Reason = "unmounted"
	case !vol.ready:
		detail := ""
		if len(vol.lastErrs) > 0 {
			detail = ": " + strings.Join(vol.lastErrs, "; ")
		}
		res.Reason = fmt.Sprintf("gcsfuse failed to start (%s)%s%s", how, memoryVerdict(vol.memoryLimit, vol.outOfMemory), detail)
		vol.send(handoff.Status{State: handoff.StateFailed, Message: res.Reason})
	default:
		res.Reason = fmt.Sprintf("gcsfuse died (%s)%s", how, memoryVerdict(vol.memoryLimit, vol.outOfMemory))
		if len(vol.lastErrs) > 0 {
			res.Reason += "; last errors: " + strings.Join(vol.lastErrs, " | ")
		}
		// The node plugin turns this into the pod's Event: it must say which volume and
		// bucket stopped serving and what gcsfuse last complained about.
		vol.send(handoff.Status{State: handoff.StateExited, Message: res.describe()})
	}
	if vol.spare != nil {
		if res.Failure() {
			res.Spare, res.Served = vol.spare, vol.ready
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
	vol.log.Log(context.Background(), lvl, "gcsfuse exited", "how", how, "reason", res.Reason, "ranFor", time.Since(vol.started).Round(time.Millisecond).String())
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
