// Package sidecar is the unprivileged half of the driver: it takes FUSE descriptors that the
// node plugin offers in the pod's emptyDir, runs one gcsfuse per volume on /dev/fd/3,
// supervises them, and ends at the right moment.
//
// When to end (see docs/lifecycle.md):
//   - native sidecar: the kubelet sends SIGTERM only after every regular container has
//     exited, so all files are closed and flushed: kill gcsfuse and exit at once. Unless
//     regular init containers that use the mounts may still run (InitContainers set and the
//     init-done file absent): then SIGTERM starts a drain, as in legacy mode.
//   - legacy sidecar: the node plugin writes the exit file when the workload is done; a
//     SIGTERM (pod deletion, sent to the app at the same time) only starts a drain that keeps
//     every mount serving until the exit file arrives or the kubelet's grace period is over.
//   - a volume failing (gcsfuse dying, a refused hand-off) never ends the sidecar: the other
//     volumes keep serving the app; the failure is reported at once to the node plugin, and
//     at the usual end as exit code 1 with the reasons in the termination message.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/dirwatch"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle/sidecarrule"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Bounds on the waits of the shutdown path.
const (
	// reapTimeout bounds the wait for every gcsfuse, together, after SIGKILL. They die in
	// well under a second; the bound only keeps a stuck process from holding the pod.
	reapTimeout = 5 * time.Second
	// attachStopTimeout bounds the wait for in-flight hand-offs at shutdown; their dial and
	// receive end as soon as the sidecar's context is cancelled.
	attachStopTimeout = 2 * time.Second
	// degradeInitWait bounds the wait for the kernel's INIT when answering a failed volume
	// with I/O errors: INIT is queued at mount time, so it is there at once or never.
	degradeInitWait = 500 * time.Millisecond
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
	// SystemRoots is the system's CA bundle, which a volume's extra CA bundle is added to
	// (empty: DefaultSystemRoots).
	SystemRoots string
	// Mode is contract.ModeNative or contract.ModeLegacy.
	Mode string
	// Grace is the pod's terminationGracePeriodSeconds. A deletion may apply another grace
	// (kubectl delete --grace-period); the node plugin's terminating file then says so.
	Grace time.Duration
	// Drain keeps every mount serving after SIGTERM while containers may still use it (see
	// shouldDrain). The command turns it on by default; off, SIGTERM stops at once in every
	// mode, which only the data-loss benchmark wants (to measure what the drain saves).
	Drain bool
	// InitContainers are the regular init containers that start after a native sidecar and
	// mount a gcsfuse volume (contract.EnvInitContainers): until the init-done file says
	// they are over, a SIGTERM can reach them and this sidecar together.
	InitContainers []string
	// GcsfuseMemoryLimit bounds each gcsfuse's memory, in bytes (0: none): its data segment
	// (RLIMIT_DATA, which counts the Go heap gcsfuse maps), with GOMEMLIMIT at
	// gcsfuseSoftMemoryShare of it so that its collector works harder first. The node's
	// mounter runs every sharing key's gcsfuse in one container under one memory limit: past
	// the container's, the kernel's OOM killer takes the container, and every key with it
	// (on cgroup v2 with the kubelet's default, memory.oom.group), where past this one
	// gcsfuse fails its own allocation and ends, its key alone (memoryVerdict).
	GcsfuseMemoryLimit int64
	// CredentialConfig is the pod's credential configuration (contract.EnvCredentialConfig:
	// the JSON the webhook checked, from the ConfigMap the pod names; empty: none), and
	// CredentialConfigMap that ConfigMap's name, for messages: every gcsfuse of the pod
	// whose volume has no identity of its own (no key file from the node plugin) reads
	// with it. Checked again by Validate; not in ModeShared.
	CredentialConfig    []byte
	CredentialConfigMap string
	// TerminationLog receives the reason for a non-zero exit ("" to skip).
	TerminationLog string
	Log            *slog.Logger
}

// Sidecar is one run of the sidecar.
type Sidecar struct {
	cfg Config
	log *slog.Logger

	// tmp is the pinned TmpDir (taken records go there without following symlinks); set
	// by Run before any hand-off starts, closed after shutdown.
	tmp *os.File
	// cancel ends every in-flight hand-off (its retries, dial and receive); shutdown calls it.
	cancel context.CancelFunc
	// attaching counts the hand-off goroutines; shutdown waits for them (bounded).
	attaching sync.WaitGroup

	mu       sync.Mutex
	volumes  map[string]*volume
	pending  map[string]bool // sockets being connected to
	draining bool            // SIGTERM started a drain: new volumes announce it too
	// stopExpected: shutdown began for an end the pod expects (its code 0); set before
	// stopped closes.
	stopExpected bool
	// taken says which volumes this container took (and started a gcsfuse for).
	taken map[string]bool

	exits   chan exitResult
	stopped chan struct{} // closed (under mu) when shutdown begins

	// failed holds why volumes failed (gcsfuse died, never started, hand-off refused, died
	// with a previous container of this sidecar); the sidecar then ends with code 1. Only
	// Run's goroutine touches it, as it does degraded.
	failed   []string
	degraded []*os.File // closed at shutdown, which ends their servers
	// lost holds why each volume a previous container of this sidecar took was lost with it
	// (adoptPredecessor); one this container takes again (the node plugin mounted it again
	// for it) is not lost. Only Run's goroutine touches it.
	lost map[string]string

	// events, if set, replaces the watcher's channel in Run: tests feed it what the kernel
	// only produces under load (an Overflow). Nil in production.
	events func(watched <-chan dirwatch.Event) <-chan dirwatch.Event
}

// New returns a Sidecar.
func New(cfg Config) (*Sidecar, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	return newSidecar(cfg), nil
}

// Validate reports the first thing wrong with cfg, so that a bad flag or environment fails
// the container at start with a message naming it.
func (cfg Config) Validate() error {
	switch {
	case !filepath.IsAbs(cfg.TmpDir):
		return fmt.Errorf("the %s directory %q is not an absolute path", contract.TmpVolumeName, cfg.TmpDir)
	case cfg.Mode != contract.ModeNative && cfg.Mode != contract.ModeLegacy && cfg.Mode != contract.ModeShared:
		return fmt.Errorf("mode %q: want %q, %q or %q", cfg.Mode, contract.ModeNative, contract.ModeLegacy, contract.ModeShared)
	case cfg.GcsfusePath == "":
		return errors.New("no gcsfuse binary")
	case cfg.Grace < 0:
		return fmt.Errorf("grace period %s is negative", cfg.Grace)
	case len(cfg.CredentialConfig) > 0 && cfg.Mode == contract.ModeShared:
		return errors.New("a credential configuration is the pod's sidecar's, not the node's shared mounter's")
	case cfg.GcsfuseMemoryLimit != 0 && cfg.GcsfuseMemoryLimit < minGcsfuseMemoryLimit:
		return fmt.Errorf("gcsfuse memory limit %d bytes: want 0 (none) or at least %d MiB (gcsfuse's own start-up)", cfg.GcsfuseMemoryLimit, minGcsfuseMemoryLimit>>20)
	}
	if len(cfg.CredentialConfig) > 0 {
		// What the webhook checked, checked again: a pod copied from an injected one keeps
		// the sidecar's environment without passing the webhook's checks.
		if _, err := credentials.ParseCredentialConfig(cfg.CredentialConfigMap, cfg.CredentialConfig,
			credentials.CredentialRules{AnyTokenURL: true, Reserved: []string{cfg.TmpDir}}); err != nil {
			return fmt.Errorf("$%s: %w", contract.EnvCredentialConfig, err)
		}
	}
	for _, d := range []string{cfg.CacheDir, cfg.BufferDir} {
		if d != "" && !filepath.IsAbs(d) {
			return fmt.Errorf("directory %q is not an absolute path", d)
		}
	}
	return nil
}

// newSidecar fills defaults without validating: unit tests of single steps build partial
// configurations.
func newSidecar(cfg Config) *Sidecar {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Grace <= 0 {
		cfg.Grace = contract.DefaultGraceSeconds * time.Second
	}
	if cfg.SystemRoots == "" {
		cfg.SystemRoots = DefaultSystemRoots
	}
	return &Sidecar{cfg: cfg, log: cfg.Log, cancel: func() {}, volumes: map[string]*volume{}, pending: map[string]bool{},
		taken: map[string]bool{}, lost: map[string]string{}, exits: make(chan exitResult, 16), stopped: make(chan struct{})}
}

// Run serves until the sidecar must end and returns the process exit code. terminate
// delivers SIGTERM/SIGINT.
func (s *Sidecar) Run(ctx context.Context, terminate <-chan os.Signal) int {
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.cancel = cancel
	w, err := dirwatch.New()
	if err != nil {
		return s.fail(fmt.Sprintf("cannot watch %s: %v", s.cfg.TmpDir, err))
	}
	defer w.Close()
	if w.Polling {
		s.log.Warn("the kernel refused an inotify instance (fs.inotify.max_user_instances is shared by every sidecar of the node); listing the directories instead",
			"interval", dirwatch.PollInterval.String(), "err", w.Fallback)
	}
	if err := w.Add(s.cfg.TmpDir); err != nil {
		return s.fail(fmt.Sprintf("cannot watch %s (is the %s emptyDir mounted?): %v", s.cfg.TmpDir, contract.TmpVolumeName, err))
	}
	tmpDir, err := podpath.OpenDir(s.cfg.TmpDir)
	if err != nil {
		return s.fail(err.Error())
	}
	defer tmpDir.Close()
	s.tmp = tmpDir
	var running *os.File // the mounter's running lock
	var lockCheck <-chan time.Time
	if s.cfg.Mode == contract.ModeShared {
		// Held for the process's life: the node plugin, stopping, removes the shared
		// directory only while no mounter holds it (uninstall leaves nothing). Before the
		// metrics socket, which the directory must be the mounter's to hold.
		var code int
		var ok bool
		if running, code, ok = s.holdMounterRunning(ctx, tmpDir, terminate); !ok {
			return code
		}
		defer func() { running.Close() }()
		t := time.NewTicker(mounterLockCheck)
		defer t.Stop()
		lockCheck = t.C
	}
	if stopMetrics, err := s.serveMetrics(tmpDir); err != nil {
		s.log.Warn("cannot serve gcsfuse metrics; the volumes serve without them", "err", err)
	} else {
		defer stopMetrics()
	}

	// The exit file's name is the trigger, at start as in the loop below: the node plugin
	// writes it atomically, so a name that cannot be read (its content garbled, or not a
	// regular file) still says the workload is done. Treating it as absent here would keep
	// a restarted sidecar serving forever while a running one would have exited on it.
	if r, err := podfiles.Read(tmpDir); err == nil || !errors.Is(err, fs.ErrNotExist) {
		// The workload is already done: this is a container restarted after its end (a
		// legacy sidecar that exited 1 under restartPolicy OnFailure). Its predecessor
		// reported its failures; exiting 1 again would restart it forever.
		if err != nil {
			s.log.Warn("exit file present at start but unreadable; the workload is done", "err", err)
			r = podfiles.Reason{Rule: "unreadable-exit-file"}
		}
		s.log.Info("exit file present at start: the workload is done", "rule", r.Rule)
		return s.shutdown("exit file present at start: "+r.Rule, r, 0)
	}

	if s.cfg.Mode == contract.ModeShared {
		// A predecessor that stopped left its record: this mounter takes mounts.
		if err := podfiles.RemoveMounterStopping(tmpDir); err != nil {
			s.log.Error("cannot remove the previous mounter's stopping record; the node plugin refuses shared volumes until it is gone", "err", err)
		}
	}
	var handoffDir *os.File
	defer func() {
		if handoffDir != nil {
			handoffDir.Close()
		}
	}()
	handoffPath := podfiles.At(s.cfg.TmpDir).HandoffDir()
	watchHandoff := func() {
		if handoffDir != nil {
			return
		}
		d, err := podfiles.OpenHandoffDir(s.cfg.TmpDir)
		if err != nil {
			return // not created yet: the watch on TmpDir will tell us
		}
		if err := w.Add(handoffPath); err != nil {
			d.Close()
			s.log.Error("cannot watch hand-off directory", "err", err)
			return
		}
		handoffDir = d
		// Sockets created before the watch existed. A failed listing is logged; what it
		// returned is still attached, and a later overflow rescan lists again.
		entries, err := d.ReadDir(-1)
		if err != nil {
			s.log.Error("cannot list the hand-off directory; offers made before the watch may wait for a rescan", "err", err)
		}
		for _, e := range entries {
			s.attach(ctx, handoffDir, e.Name())
		}
	}
	// Before any offer is taken: a taken offer replaces its volume's record.
	s.adoptPredecessor(tmpDir)
	watchHandoff()
	s.log.Info("sidecar ready", "mode", s.cfg.Mode, "grace", s.cfg.Grace.String(), "drain", s.cfg.Drain,
		"initContainers", s.cfg.InitContainers, "uid", os.Getuid(), "startupMs", time.Since(start).Milliseconds())

	var (
		sigterm time.Time   // when the first SIGTERM came; zero before
		drain   *time.Timer // the drain deadline while draining
		drainC  <-chan time.Time
	)
	defer func() {
		if drain != nil {
			drain.Stop()
		}
	}()
	events := w.C
	if s.events != nil {
		events = s.events(w.C)
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return s.shutdown("inotify watcher ended", podfiles.Reason{}, s.fail("inotify watcher ended"))
			}
			batch := []dirwatch.Event{ev}
			if ev.Overflow {
				// Events were dropped: what is in the directories now stands for them.
				batch = s.rescanEvents(tmpDir, handoffDir)
				s.log.Warn("inotify queue overflowed; listed the directories again", "names", len(batch))
			}
			for _, ev := range batch {
				switch {
				case ev.Dir == s.cfg.TmpDir && ev.Name == podfiles.HandoffDir:
					watchHandoff()
				case ev.Dir == s.cfg.TmpDir && ev.Name == podfiles.ExitFile:
					r, err := podfiles.Read(tmpDir)
					if err != nil {
						s.log.Warn("exit file unreadable; exiting anyway", "err", err)
					}
					return s.shutdown("exit file: "+r.Rule, r, 0)
				case ev.Dir == s.cfg.TmpDir && ev.Name == podfiles.TerminatingFile:
					t, err := s.readTerminating(tmpDir)
					switch {
					case drain == nil:
						if err == nil {
							s.log.Info("pod is being deleted", "graceSeconds", t.GraceSeconds, "deletionTimestamp", t.DeletionTimestamp)
						}
					case err == nil:
						// The node plugin saw the deletion after our SIGTERM: its grace, not the
						// spec's, is when the kubelet kills the app.
						d, grace, source := sidecarrule.DrainDeadline(sigterm, s.cfg.Grace, deletionGrace(&t))
						drain.Reset(time.Until(d))
						s.log.Info("drain deadline moved", "deadline", d.Format(time.RFC3339Nano), "grace", grace.String(), "graceSource", string(source))
					}
				case ev.Dir == handoffPath && handoffDir != nil:
					s.attach(ctx, handoffDir, ev.Name)
				}
			}
		case res := <-s.exits:
			if s.volumeEnded(res) == 0 && drain != nil && s.cfg.Mode == contract.ModeShared {
				// The node plugin unmounts a shared volume once no pod uses it: the last one
				// gone, nothing is left to keep serving.
				return s.shutdown("every shared volume unmounted while draining", podfiles.Reason{}, 0)
			}
		case sig := <-terminate:
			if !sigterm.IsZero() {
				s.log.Info("signal while draining; still waiting for the exit file or the deadline", "signal", sig.String())
				continue
			}
			sigterm = time.Now()
			ok, why := s.shouldDrain(tmpDir)
			if !ok {
				s.log.Info("signal: stopping now", "signal", sig.String(), "mode", s.cfg.Mode, "draining", false, "why", why)
				s.markStopping(tmpDir, sigterm)
				return s.shutdown(sig.String()+" in "+s.cfg.Mode+" mode: "+why, podfiles.Reason{}, 0)
			}
			var term *podfiles.Terminating
			if t, err := s.readTerminating(tmpDir); err == nil {
				term = &t
			}
			d, grace, source := sidecarrule.DrainDeadline(sigterm, s.cfg.Grace, deletionGrace(term))
			d = s.reportMargin(sigterm, d)
			s.log.Info("signal: keep serving until the workload is done", "signal", sig.String(), "mode", s.cfg.Mode,
				"draining", true, "why", why, "deadline", d.Format(time.RFC3339Nano), "grace", grace.String(), "graceSource", string(source))
			drain = time.NewTimer(time.Until(d))
			drainC = drain.C
			s.startDrain()
			// After startDrain: from the record on, no new mount is taken either.
			s.markStopping(tmpDir, d)
		case <-drainC:
			return s.shutdown("drain deadline: the kubelet's grace period is over", podfiles.Reason{}, 0)
		case <-lockCheck:
			if err := s.keepMounterRunning(tmpDir, &running); err != nil {
				return s.shutdown(err.Error(), podfiles.Reason{}, s.fail(err.Error()))
			}
		case <-ctx.Done():
			return s.shutdown("context ended", podfiles.Reason{}, 0)
		}
	}
}

// mounterLockCheck is how often the node's mounter checks that its directory and its
// running lock file are still there (keepMounterRunning).
const mounterLockCheck = 5 * time.Second

// keepMounterRunning checks the mounter's directory and running lock. A directory removed
// (a node plugin cleaned up while it believed no mounter ran, or someone else) with no mount
// left served is an error: the mounter must start again in the new one; with mounts served,
// they keep serving (no new one can be offered there) and the check comes again. A lock file
// that is no longer the one named there (unlinked, renamed, replaced: the next node plugin
// would lock the new one) is replaced by a lock on the named one.
func (s *Sidecar) keepMounterRunning(tmpDir *os.File, running **os.File) error {
	var dst unix.Stat_t
	if err := unix.Fstat(int(tmpDir.Fd()), &dst); err == nil && dst.Nlink == 0 {
		if n := s.liveVolumes(); n > 0 {
			s.log.Error("the mounter's directory was removed while it serves mounts: they keep serving, no new mount can reach it; it exits once they end",
				"dir", s.cfg.TmpDir, "serving", n)
			return nil
		}
		return fmt.Errorf("the mounter's directory %s was removed: %w", s.cfg.TmpDir, podfiles.ErrDirRemoved)
	}
	if podfiles.SameMounterRunning(tmpDir, *running) {
		return nil
	}
	f, err := podfiles.HoldMounterRunning(tmpDir, 0)
	if err != nil {
		s.log.Warn("the mounter's running lock file was replaced and cannot be taken again yet", "err", err)
		return nil
	}
	s.log.Warn("the mounter's running lock file was replaced; holding the new one")
	(*running).Close()
	*running = f
	return nil
}

// liveVolumes counts the volumes whose gcsfuse has not exited.
func (s *Sidecar) liveVolumes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.volumes {
		if !v.hasExited() {
			n++
		}
	}
	return n
}

// rescanEvents lists TmpDir and, once it is watched, the hand-off directory, after the
// inotify queue overflowed, and returns what it finds as the create events it stands for,
// for Run to handle exactly as those. The order matters: the hand-off directory first (its
// event starts watching it, which lists its sockets), the exit file last (it ends the run,
// so everything else found is acted on first). An unreadable directory is logged and
// skipped: the names that can be listed are still acted on.
func (s *Sidecar) rescanEvents(tmpDir, handoffDir *os.File) []dirwatch.Event {
	var first, middle, last []dirwatch.Event
	names, err := listDir(tmpDir)
	if err != nil {
		s.log.Error("cannot list the emptyDir after an inotify overflow", "dir", s.cfg.TmpDir, "err", err)
	}
	for _, n := range names {
		ev := dirwatch.Event{Dir: s.cfg.TmpDir, Name: n}
		switch n {
		case podfiles.HandoffDir:
			first = append(first, ev)
		case podfiles.ExitFile:
			last = append(last, ev)
		default:
			middle = append(middle, ev)
		}
	}
	if handoffDir != nil {
		handoffPath := podfiles.At(s.cfg.TmpDir).HandoffDir()
		names, err := listDir(handoffDir)
		if err != nil {
			s.log.Error("cannot list the hand-off directory after an inotify overflow", "dir", handoffPath, "err", err)
		}
		for _, n := range names {
			middle = append(middle, dirwatch.Event{Dir: handoffPath, Name: n})
		}
	}
	return append(append(first, middle...), last...)
}

// listDir returns the names in the pinned dir, sorted. It reads through a new descriptor
// of the same directory, so the offset of dir, shared with the hand-off goroutines, is
// left alone.
func listDir(dir *os.File) ([]string, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: dir.Name(), Err: err}
	}
	d := os.NewFile(uintptr(fd), dir.Name())
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir.Name(), err)
	}
	sort.Strings(names)
	return names, nil
}

// removeVolumeDirs removes, in the node's mounter, the directories gcsfuse had for a
// volume that ended: its per-volume directory (temp dir and taken record), write-staging
// and file-cache directories. The mounter outlives its volumes (each
// mount of a key is a new one, named by generation), so what a pod's sidecar leaves to its
// emptyDirs' deletion would pile up here. gcsfuse has exited: nothing writes there any
// more. A large file cache takes a moment: the mounter's loop waits for it (seconds at most
// for GiBs; the node plugin gives a new mount's offer 30 s).
func (s *Sidecar) removeVolumeDirs(volume string) {
	dirs := []string{podfiles.At(s.cfg.TmpDir).VolumeDir(volume)}
	for _, root := range []string{s.cfg.BufferDir, s.cfg.CacheDir} {
		if root != "" {
			dirs = append(dirs, filepath.Join(root, volume))
		}
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			s.log.Warn("cannot remove an ended volume's directory", "volume", volume, "dir", d, "err", err)
		}
	}
}

// volumeEnded handles the end of one volume: a gcsfuse that exited, or an offer that could
// not be served. A failure is recorded and answered; it never stops the other volumes,
// which the app may still be writing through.
func (s *Sidecar) volumeEnded(res exitResult) (serving int) {
	s.mu.Lock()
	if s.volumes[res.Volume] == res.vol { // not a newer volume of the same name
		delete(s.volumes, res.Volume)
	}
	serving = len(s.volumes)
	s.mu.Unlock()
	if s.cfg.Mode == contract.ModeShared {
		// After the switch below: its taken record's removal opens (makes) the directory.
		// All of it, a failed volume's taken record too: the node's mounter outlives its
		// volumes, each mount a new name, and the node plugin has the failure's report.
		defer s.removeVolumeDirs(res.Volume)
	}
	switch {
	case res.Clean:
		// The node plugin unmounted it: a restarted container must not count it as lost.
		if err := podfiles.RemoveTaken(s.tmp, res.Volume); err != nil {
			s.log.Warn("cannot remove the volume's taken record", "volume", res.Volume, "err", err)
		}
	case res.Failure():
		s.failed = append(s.failed, res.describe())
		switch {
		case res.Spare != nil && res.Served:
			s.takeOver(res.Volume, res.Spare)
		case res.Spare != nil:
			s.degrade(res.Volume, res.Spare)
		}
		s.log.Error("volume failed; the other volumes keep serving and the sidecar exits 1 when told to end",
			"volume", res.Volume, "bucket", res.Bucket, "reason", res.Reason, "stillServing", serving)
	}
	return serving
}

// report hands a volume's end to Run. Once shutdown has begun nobody reads it: a spare
// descriptor is then closed here, so it cannot leak.
func (s *Sidecar) report(r exitResult) {
	select {
	case s.exits <- r:
	case <-s.stopped:
		if r.Spare != nil {
			r.Spare.Close()
		}
	}
}

// mounterLockNotice is how often the node's mounter, waiting at start for its running lock
// (podfiles.HoldMounterRunning), says so: for the node plugin to make the directory the
// mounter's, when the mounter starts first (a fresh node, a reinstall, a node plugin rolled
// out after the mounter: the kubelet made the hostPath root's), or to finish removing it. It
// waits for as long as that takes, until SIGTERM.
const mounterLockNotice = 30 * time.Second

// mounterLockTry is each attempt's wait: how soon a signal is seen while waiting.
const mounterLockTry = time.Second

// holdMounterRunning takes the mounter's running lock in tmpDir, waiting as long as the
// node plugin has not made the directory the mounter's, and saying so every
// mounterLockNotice; ok is false when it must end instead (a signal, ctx, an error), with
// the exit code.
func (s *Sidecar) holdMounterRunning(ctx context.Context, tmpDir *os.File, terminate <-chan os.Signal) (running *os.File, code int, ok bool) {
	start, said := time.Now(), time.Now()
	for {
		f, err := podfiles.HoldMounterRunning(tmpDir, mounterLockTry)
		if err == nil {
			return f, 0, true
		}
		if errors.Is(err, podfiles.ErrDirRemoved) || (!errors.Is(err, unix.EACCES) && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EWOULDBLOCK)) {
			return nil, s.fail(fmt.Sprintf("the node's mounter cannot start: %v", err)), false
		}
		if time.Since(said) >= mounterLockNotice {
			said = time.Now()
			s.log.Warn("waiting for the node plugin to give the mounter its directory (is the node plugin running on this node?)",
				"dir", s.cfg.TmpDir, "waited", time.Since(start).Round(time.Second).String(), "err", err)
		}
		select {
		case sig := <-terminate:
			s.log.Info("signal while waiting for the mounter's directory: stopping", "signal", sig.String())
			return nil, 0, false
		case <-ctx.Done():
			return nil, 0, false
		default:
		}
	}
}

// sharedReportMargin is how long before the kubelet's SIGKILL the node's mounter ends its
// drain: its shutdown reports each mount still held as ended (its pods get Events), which a
// SIGKILL at the same moment would cut short. At most a quarter of the drain.
const sharedReportMargin = 5 * time.Second

// reportMargin is the mounter's drain deadline d, moved sharedReportMargin earlier (a
// quarter of the drain at most); a pod's sidecar keeps d, which its app may need whole.
func (s *Sidecar) reportMargin(sigterm, d time.Time) time.Time {
	if s.cfg.Mode != contract.ModeShared {
		return d
	}
	return d.Add(-min(sharedReportMargin, d.Sub(sigterm)/4))
}

// markStopping tells the node plugin, in the node's shared mounter, that this mounter is
// stopping and serves what it has until deadline: it then refuses shared publishes, which the
// kubelet retries against the next mounter, instead of handing mounts to a process about to
// end (podfiles.MounterStoppingFile). Nothing in a pod's sidecar.
func (s *Sidecar) markStopping(tmpDir *os.File, deadline time.Time) {
	if s.cfg.Mode != contract.ModeShared {
		return
	}
	if err := podfiles.WriteMounterStopping(tmpDir, deadline); err != nil {
		s.log.Error("cannot tell the node plugin the mounter is stopping; its publishes meanwhile fail after its offer wait", "err", err)
	}
}

// shutdown stops every gcsfuse in parallel, each bounded by a deadline, and returns code
// (1 instead of 0 when a volume failed during the run).
func (s *Sidecar) shutdown(why string, r podfiles.Reason, code int) int {
	t0 := time.Now()
	s.mu.Lock()
	s.stopExpected = code == 0
	close(s.stopped)
	s.mu.Unlock()
	// No hand-off may start a gcsfuse behind our back: end them, then look at the volumes.
	s.cancel()
	if !waitGroup(&s.attaching, attachStopTimeout) {
		s.log.Warn("hand-offs still in flight at shutdown", "waited", attachStopTimeout.String())
	}
	s.mu.Lock()
	vols := make([]*volume, 0, len(s.volumes))
	for _, v := range s.volumes {
		vols = append(vols, v)
	}
	s.mu.Unlock()
	for _, v := range vols {
		if s.cfg.Mode == contract.ModeShared && !v.hasExited() {
			// The node's mounter stopping under mounts that pods still hold (its grace over,
			// its context ended): their pods are told, as for any gcsfuse that ends, rather
			// than find ENOTCONN with nothing said. Sent before the kill, so that the
			// node plugin reads it as this mount's end.
			v.send(handoff.Status{State: handoff.StateExited, Message: fmt.Sprintf(
				"volume %s (bucket %s): the node's shared mounter (container %s) stopped while pods still used the mount (%s), and its gcsfuse with it: drain the node before deleting or replacing the mounter (docs/upgrade.md)",
				v.name, v.bucket, contract.SharedMounterContainerName, why)})
		}
		s.stopVolume(v, why)
	}
	for _, f := range s.degraded {
		f.Close()
	}
	s.failed = append(s.failed, s.lostVolumes()...)
	if len(s.failed) > 0 && code == 0 {
		code = s.fail(strings.Join(s.failed, "; "))
	}
	deadline := time.NewTimer(reapTimeout)
	defer deadline.Stop()
	var stuck []string
	for _, v := range vols {
		select {
		case <-v.exited:
		case <-deadline.C:
			stuck = append(stuck, v.name)
		}
	}
	attrs := []any{"why", why, "volumes", len(vols), "failed", len(s.failed), "stopMs", time.Since(t0).Milliseconds(), "code", code}
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
	return code
}

// stopVolume kills a volume's gcsfuse at shutdown. An end the pod expects (the exit file, a
// SIGTERM, the drain deadline: shutdown's code 0) is said first, in the sidecar mode: the
// node plugin then reads the mount's end as asked for, not as this container's death, which
// it would mount again for the restarted container. A failure exit (code 1: the kubelet
// restarts the sidecar) says nothing, so the volume is mounted again for the restart.
func (s *Sidecar) stopVolume(v *volume, why string) {
	s.mu.Lock()
	expected := s.stopExpected
	s.mu.Unlock()
	if expected && s.cfg.Mode != contract.ModeShared && !v.hasExited() {
		v.send(handoff.Status{State: handoff.StateStopping, Message: why})
	}
	v.kill()
}

// waitGroup waits for wg at most d and reports whether it finished. The helper goroutine
// ends with the group's goroutines, which are themselves bounded.
func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { // owned by the group: ends when its last member ends
		wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
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

// describe names a volume and its bucket for messages.
func describe(volume, bucket string) string {
	if bucket == "" {
		return "volume " + volume
	}
	return fmt.Sprintf("volume %s (bucket %q)", volume, bucket)
}
