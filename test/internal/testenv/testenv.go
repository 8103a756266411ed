// Package testenv builds the real environment that integration tests, benchmarks and the
// demo run in: the GCS emulator, a kubelet-shaped directory tree, the node plugin serving
// CSI on a unix socket, and the real sidecar binary running gcsfuse as uid 65534.
package testenv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/procs"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
)

// Prereqs reports what is missing to run real mounts here ("" when nothing is).
func Prereqs() string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		missing = append(missing, "/dev/fuse")
	}
	if GcsfusePath() == "" {
		missing = append(missing, "gcsfuse (run hack/install-deps.sh)")
	}
	return strings.Join(missing, ", ")
}

// GcsfusePath finds the gcsfuse binary: $GCSFUSE_BIN, the project cache, then $PATH.
func GcsfusePath() string {
	for _, p := range []string{os.Getenv("GCSFUSE_BIN"), CacheDir() + "/bin/gcsfuse"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	p, _ := exec.LookPath("gcsfuse")
	return p
}

// CacheDir is where hack/install-deps.sh puts tools ($GCSFUSE_CSI_CACHE).
func CacheDir() string {
	if d := os.Getenv("GCSFUSE_CSI_CACHE"); d != "" {
		return d
	}
	return "/var/cache/gcsfuse-csi"
}

// Env is one environment. Close it to unmount, stop and remove everything.
type Env struct {
	Root        string // kubelet root
	Emulator    *emulator.Server
	Node        csi.NodeClient
	Endpoint    string // the node plugin's CSI endpoint (unix://...)
	Log         *slog.Logger
	SidecarBin  string
	GcsfuseBin  string
	nodeSrv     *grpc.Server
	conn        *grpc.ClientConn
	mu          sync.Mutex
	sidecars    []*Sidecar
	targets     []string
	offers      []*RawOffer
	emulatorOwn bool
}

// Options for New.
type Options struct {
	Buckets []string
	// Emulator, if set, is shared instead of starting a new one.
	Emulator *emulator.Server
	// SidecarBin is a prebuilt sidecar; empty builds one.
	SidecarBin string
	Log        *slog.Logger
	// NodeMetrics, if set, records the node plugin's volume metrics.
	NodeMetrics *csidriver.Metrics
	// Credentials is the node plugin's credential configuration.
	Credentials credentials.Config
	// Events, if set, receives the node plugin's Events.
	Events csidriver.EventSink
	// Proxy and CABundle are the node plugin's --https-proxy/--http-proxy/--no-proxy and
	// --ca-bundle-file content, for every volume's gcsfuse.
	Proxy    netconf.Proxy
	CABundle []byte
	// Shared turns on the shared mount mode (SharedDir below the kubelet root) with this
	// linger; StartMounter runs its mounter.
	Shared       bool
	SharedLinger time.Duration
	// SharedOfferWait is the node plugin's wait for the mounter to take a shared mount (0:
	// its default).
	SharedOfferWait time.Duration
	// SharedADC are the namespaces whose shared volumes may read with the mounter's
	// Application Default Credentials (the emulator's anonymous access here); nil: "default",
	// the namespace of every pod of the env, so that a test of something else is not refused.
	SharedADC credentials.SharedADC
}

// New starts the emulator (unless shared), the node plugin and prepares a kubelet root.
func New(o Options) (*Env, error) {
	if miss := Prereqs(); miss != "" {
		return nil, fmt.Errorf("integration environment needs: %s", miss)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	root, err := os.MkdirTemp("", "gcsfuse-csi-kubelet-")
	if err != nil {
		return nil, err
	}
	// The sidecar runs as uid 65534 and must reach its emptyDir below this root.
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err
	}
	e := &Env{Root: root, Log: o.Log, GcsfuseBin: GcsfusePath(), SidecarBin: o.SidecarBin}
	fail := func(err error) (*Env, error) { e.Close(); return nil, err }
	if e.SidecarBin == "" {
		e.SidecarBin = filepath.Join(root, "gcsfuse-sidecar")
		if err := BuildSidecar(e.SidecarBin); err != nil {
			return fail(err)
		}
	}
	if o.Emulator != nil {
		e.Emulator = o.Emulator
	} else {
		if e.Emulator, err = emulator.Start("127.0.0.1", 0, o.Buckets...); err != nil {
			return fail(err)
		}
		e.emulatorOwn = true
	}
	sock := filepath.Join(root, "csi.sock")
	e.Endpoint = "unix://" + sock
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fail(err)
	}
	if o.Shared {
		// The mounter runs on the host's paths here: it must reach its directory.
		if err := os.MkdirAll(e.sharedDir(true), 0o755); err != nil {
			return fail(err)
		}
		for d := e.sharedDir(true); d != root; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				return fail(err)
			}
		}
	}
	adc := o.SharedADC
	if adc == nil {
		adc = credentials.SharedADC{"default"}
	}
	ns, err := csidriver.NewNodeServer(csidriver.Config{
		NodeID: "test-node", KubeletRoot: root, SidecarUID: contract.SidecarUID, SidecarGID: contract.SidecarGID,
		GCSEndpoint: e.Emulator.Endpoint, Credentials: o.Credentials, Metrics: o.NodeMetrics, Proxy: o.Proxy, CABundle: o.CABundle,
		// The sidecar runs on the host's paths here, not in a container with the emptyDir at
		// contract.TmpMountPath.
		SidecarTmpPath: func(podUID string) string { return e.podTmpDir(podUID) },
		SharedDir:      e.sharedDir(o.Shared), SharedLinger: o.SharedLinger, SharedOfferWait: o.SharedOfferWait, MounterTmpPath: filepath.Join(e.sharedDir(o.Shared), "mounter"),
		SharedADC: adc,
	}, o.Events, o.Log)
	if err != nil {
		return fail(err)
	}
	e.nodeSrv = csidriver.NewGRPCServer(&csidriver.IdentityServer{}, ns, o.Log)
	go func() { _ = e.nodeSrv.Serve(ln) }() // stopped by Close
	e.conn, err = grpc.NewClient(e.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fail(err)
	}
	e.Node = csi.NewNodeClient(e.conn)
	return e, nil
}

// sharedDir is the node plugin's --shared-dir when on ("" when off).
func (e *Env) sharedDir(on bool) string {
	if !on {
		return ""
	}
	return filepath.Join(e.Root, "plugins", "shared")
}

// MounterDir is the shared mounter's directory (its --tmp-dir).
func (e *Env) MounterDir() string { return filepath.Join(e.sharedDir(true), "mounter") }

// StartMounter runs the real sidecar binary in the node mounter's mode, as uid/gid 65534
// with no capabilities, on MounterDir. o.Mode and o.UserNS are ignored.
func (e *Env) StartMounter(o SidecarOptions) (*Sidecar, error) {
	args := append([]string{"--mode=" + contract.ModeShared, "--tmp-dir=" + e.MounterDir(), "--gcsfuse=" + e.GcsfuseBin,
		"--grace-seconds=" + strconv.Itoa(o.GraceSeconds), "--termination-log=" + filepath.Join(e.Root, "mounter-termination-log")}, o.Args...)
	return e.startSidecarProcess(exec.Command(e.SidecarBin, args...), &syscall.Credential{Uid: contract.SidecarUID, Gid: contract.SidecarGID}, o.Echo)
}

// BuildSidecar builds cmd/gcsfuse-sidecar into out.
func BuildSidecar(out string) error { return GoBuild(out, "./cmd/gcsfuse-sidecar") }

// GoBuild builds a package of the repository (a path relative to its root, of the product
// module or the tests') into out, in the repository's workspace (go.work at its root).
func GoBuild(out, pkg string) error {
	work, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return fmt.Errorf("go env GOWORK: %w", err)
	}
	if w := strings.TrimSpace(string(work)); w == "" || w == "off" {
		return fmt.Errorf("build %s: no go.work (GOWORK=%q): run from the repository, whose go.work joins its two modules", pkg, w)
	}
	// Static and -trimpath, as the images build it (and hack/lib.sh every build of the
	// scripts): the packages compiled once serve both, under go test -race's cgo too.
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(work)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return os.Chmod(out, 0o755)
}

// Pod is a pod's directory tree under the kubelet root.
type Pod struct {
	UID    string
	TmpDir string // its gcsfuse-tmp emptyDir
	env    *Env
}

// NewPod creates a pod directory with the gcsfuse-tmp emptyDir (mode 0777, as the kubelet
// makes it).
func (e *Env) NewPod() (*Pod, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	uid := fmt.Sprintf("%x-%x", b[:4], b[4:])
	p := &Pod{UID: uid, env: e, TmpDir: e.podTmpDir(uid)}
	if err := os.MkdirAll(p.TmpDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(podfiles.CSIVolumesDir(e.Root, uid), 0o750); err != nil {
		return nil, err
	}
	for d := p.TmpDir; d != e.Root; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			return nil, err
		}
	}
	return p, os.Chmod(p.TmpDir, 0o777)
}

func (e *Env) podTmpDir(uid string) string {
	return podfiles.TmpDirPath(e.Root, uid)
}

// Target is the kubelet's target path for a volume of the pod.
func (p *Pod) Target(volume string) string {
	return podfiles.CSITargetPath(p.env.Root, p.UID, volume)
}

// PublishRequest is an inline-volume NodePublishVolume request for the pod.
func (p *Pod) PublishRequest(volume, bucket, mountOptions string, readOnly bool) *csi.NodePublishVolumeRequest {
	attrs := map[string]string{
		contract.AttrBucketName: bucket, contract.CtxPodUID: p.UID, contract.CtxPodName: "pod-" + p.UID[:4],
		contract.CtxPodNamespace: "default", contract.CtxEphemeral: "true",
	}
	if mountOptions != "" {
		attrs[contract.AttrMountOptions] = mountOptions
	}
	return &csi.NodePublishVolumeRequest{
		VolumeId:   "csi-" + p.UID + "-" + volume,
		TargetPath: p.Target(volume),
		Readonly:   readOnly,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		},
		VolumeContext: attrs,
	}
}

// Publish calls NodePublishVolume and remembers the target for Close.
func (p *Pod) Publish(ctx context.Context, volume, bucket, mountOptions string, readOnly bool) error {
	return p.PublishReq(ctx, p.PublishRequest(volume, bucket, mountOptions, readOnly))
}

// PublishReq calls NodePublishVolume with req (from PublishRequest, changed by the caller:
// attributes, secrets) and remembers the target for Close.
func (p *Pod) PublishReq(ctx context.Context, req *csi.NodePublishVolumeRequest) error {
	if err := os.MkdirAll(filepath.Dir(req.TargetPath), 0o750); err != nil {
		return err
	}
	_, err := p.env.Node.NodePublishVolume(ctx, req)
	if err == nil {
		p.env.mu.Lock()
		p.env.targets = append(p.env.targets, req.TargetPath)
		p.env.mu.Unlock()
	}
	return err
}

// Unpublish calls NodeUnpublishVolume.
func (p *Pod) Unpublish(ctx context.Context, volume string) error {
	_, err := p.env.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "csi-" + p.UID + "-" + volume, TargetPath: p.Target(volume)})
	return err
}

// Sidecar is a running sidecar process.
type Sidecar struct {
	Cmd    *exec.Cmd
	out    *syncbuf.Buffer
	done   chan struct{}
	err    error
	Exited time.Time
}

// StartSidecar runs the real sidecar binary for the pod as uid/gid 65534 with no
// capabilities. mode is contract.ModeNative or ModeLegacy. Output is also copied to echo
// when it is not nil.
func (p *Pod) StartSidecar(mode string, graceSeconds int, echo io.Writer) (*Sidecar, error) {
	return p.StartSidecarWith(SidecarOptions{Mode: mode, GraceSeconds: graceSeconds, Echo: echo})
}

// SidecarOptions configure StartSidecarWith.
type SidecarOptions struct {
	Mode         string
	GraceSeconds int
	// InitContainers is passed as contract.EnvInitContainers (comma separated).
	InitContainers []string
	// Args are extra command-line flags (e.g. "--drain=false").
	Args []string
	// Echo, if not nil, receives a copy of the output.
	Echo io.Writer
	// UserNS, if set, is a user namespace (a /proc/PID/ns/user path) for the sidecar to run
	// in, to bound it by that namespace's limits (its max_inotify_instances, say) without
	// changing the machine's. util-linux's nsenter enters it as root and becomes uid/gid
	// 65534 with no supplementary groups before it execs the sidecar: a Go process cannot
	// join a user namespace itself (setns refuses a multi-threaded caller). The sidecar
	// keeps its pid (nsenter execs it), its process group, and no capabilities.
	UserNS string
}

// StartSidecarWith runs the real sidecar binary for the pod as uid/gid 65534 with no
// capabilities, as StartSidecar, with more options.
func (p *Pod) StartSidecarWith(o SidecarOptions) (*Sidecar, error) {
	args := append([]string{"--tmp-dir=" + p.TmpDir, "--gcsfuse=" + p.env.GcsfuseBin,
		"--termination-log=" + filepath.Join(p.TmpDir, "termination-log")}, o.Args...)
	bin, cred := p.env.SidecarBin, &syscall.Credential{Uid: contract.SidecarUID, Gid: contract.SidecarGID}
	if o.UserNS != "" {
		nsenter, err := exec.LookPath("nsenter")
		if err != nil {
			return nil, fmt.Errorf("run the sidecar in user namespace %s: %w", o.UserNS, err)
		}
		args = append([]string{"--user=" + o.UserNS, "--setuid=" + strconv.Itoa(contract.SidecarUID),
			"--setgid=" + strconv.Itoa(contract.SidecarGID), "--", bin}, args...)
		bin, cred = nsenter, nil // root until nsenter has entered the namespace
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{contract.EnvSidecarMode + "=" + o.Mode, contract.EnvGraceSeconds + "=" + strconv.Itoa(o.GraceSeconds)}
	if len(o.InitContainers) > 0 {
		cmd.Env = append(cmd.Env, contract.EnvInitContainers+"="+strings.Join(o.InitContainers, ","))
	}
	return p.env.startSidecarProcess(cmd, cred, o.Echo)
}

// startSidecarProcess starts cmd (a sidecar or the mounter) with its output kept, in its
// own process group, and records it for Close.
func (e *Env) startSidecarProcess(cmd *exec.Cmd, cred *syscall.Credential, echo io.Writer) (*Sidecar, error) {
	out := &syncbuf.Buffer{Echo: echo}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		Setpgid:    true, // so Close can kill gcsfuse children too if a test fails midway
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	s := &Sidecar{Cmd: cmd, out: out, done: make(chan struct{})}
	go func() { // owned by s: reaps the process
		s.err = cmd.Wait()
		s.Exited = time.Now()
		close(s.done)
	}()
	e.mu.Lock()
	e.sidecars = append(e.sidecars, s)
	e.mu.Unlock()
	return s, nil
}

// TerminationMessage is what the sidecar wrote to its termination log ("" if nothing).
func (p *Pod) TerminationMessage() string {
	b, _ := os.ReadFile(filepath.Join(p.TmpDir, "termination-log"))
	return string(b)
}

// OpenTmpDir opens the pod's gcsfuse-tmp emptyDir as the node plugin does (pinned, no
// symlinks), for podfiles' *In functions. The caller closes it.
func (p *Pod) OpenTmpDir() (*os.File, error) {
	return podfiles.OpenTmpDir(p.env.Root, p.UID)
}

// MountFuse mounts the volume's target with a new FUSE connection, as NodePublishVolume
// does, and returns the connection; Close unmounts the target. For tests that play the node
// plugin's part themselves.
func (p *Pod) MountFuse(volume, bucket string) (*os.File, error) {
	target := p.Target(volume)
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, err
	}
	fuse, err := fusemount.Mount(target, fusemount.Options{Source: bucket, UserID: contract.SidecarUID, GroupID: contract.SidecarGID})
	if err != nil {
		return nil, err
	}
	p.env.mu.Lock()
	p.env.targets = append(p.env.targets, target)
	p.env.mu.Unlock()
	return fuse, nil
}

// RawOffer is a hand-off offered by the test instead of the node plugin: it mounts the
// target and offers exactly the Volume given (which may be one the node plugin would never
// send), and records every Status the sidecar answers.
type RawOffer struct {
	offer *handoff.Offer
	mu    sync.Mutex
	got   []handoff.Status
	ch    chan struct{} // closed and replaced on each status
}

// OfferRaw mounts v's target and offers v in the pod's hand-off directory.
func (p *Pod) OfferRaw(v handoff.Volume) (*RawOffer, error) {
	fuse, err := p.MountFuse(v.VolumeName, v.Bucket)
	if err != nil {
		return nil, err
	}
	tmp, err := p.OpenTmpDir()
	if err != nil {
		fuse.Close()
		return nil, err
	}
	dir, err := podfiles.CreateHandoffDir(tmp)
	tmp.Close()
	if err != nil {
		fuse.Close()
		return nil, err
	}
	r := &RawOffer{ch: make(chan struct{})}
	r.offer, err = handoff.NewOffer(handoff.OfferConfig{
		Dir: dir, Volume: &v, Fuse: fuse, UID: contract.SidecarUID, GID: contract.SidecarGID, Log: p.env.Log,
		OnStatus: func(st *handoff.Status) {
			r.mu.Lock()
			r.got = append(r.got, *st)
			close(r.ch)
			r.ch = make(chan struct{})
			r.mu.Unlock()
		},
	})
	if err != nil {
		fuse.Close()
		dir.Close()
		return nil, err
	}
	p.env.mu.Lock()
	p.env.offers = append(p.env.offers, r)
	p.env.mu.Unlock()
	return r, nil
}

// Statuses returns the Status frames received so far.
func (r *RawOffer) Statuses() []handoff.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]handoff.Status(nil), r.got...)
}

// WaitStatus waits at most d for a Status with the given state and returns it.
func (r *RawOffer) WaitStatus(state string, d time.Duration) (handoff.Status, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, st := range r.got {
			if st.State == state {
				r.mu.Unlock()
				return st, nil
			}
		}
		ch := r.ch
		r.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return handoff.Status{}, fmt.Errorf("no %q status after %s; got %+v", state, d, r.Statuses())
		}
	}
}

// Stop ends the offer (bounded). Safe to call more than once; Close calls it.
func (r *RawOffer) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.offer.Stop(ctx)
}

// Output is everything the sidecar printed so far.
func (s *Sidecar) Output() string { return s.out.String() }

// Wait waits for the sidecar to exit, at most d, and returns its exit code.
func (s *Sidecar) Wait(d time.Duration) (int, error) {
	select {
	case <-s.done:
	case <-time.After(d):
		return -1, fmt.Errorf("sidecar still running after %s", d)
	}
	var ee *exec.ExitError
	if errors.As(s.err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, s.err
}

// Done is closed when the sidecar has exited.
func (s *Sidecar) Done() <-chan struct{} { return s.done }

// Signal sends sig to the sidecar process.
func (s *Sidecar) Signal(sig os.Signal) error { return s.Cmd.Process.Signal(sig) }

// GcsfusePIDs lists running gcsfuse processes serving one of the pod's volumes.
func (p *Pod) GcsfusePIDs() []int {
	return GcsfusePIDs(func(args []string) bool {
		return strings.Contains(strings.Join(args, " "), p.TmpDir) && args[len(args)-1] == "/dev/fd/3"
	})
}

// GcsfusePIDs lists the gcsfuse processes on this host whose arguments satisfy match.
func GcsfusePIDs(match func(args []string) bool) []int {
	return ProcessPIDs(func(args []string) bool {
		return len(args) > 1 && filepath.Base(args[0]) == "gcsfuse" && match(args)
	})
}

// ProcessPIDs lists the processes on this host whose command line (argv) satisfies match.
func ProcessPIDs(match func(args []string) bool) []int { return procs.PIDs(match) }

// ProcessArgs is the argument list of process pid (nil once it has ended).
func ProcessArgs(pid int) []string { return procs.Args(pid) }

// MountsOfSource lists the mounts of source in every mount namespace of this host.
func MountsOfSource(source string) ([]string, error) { return procs.MountsOfSource(source) }

// WaitReady waits until a stat through the target succeeds, at most d.
func WaitReady(target string, d time.Duration) (time.Duration, error) {
	start := time.Now()
	ch := make(chan error, 1)
	go func() { // a stat of a mount whose server has not started blocks in the kernel
		_, err := os.Stat(target + "/.")
		ch <- err
	}()
	select {
	case err := <-ch:
		return time.Since(start), err
	case <-time.After(d):
		return 0, fmt.Errorf("stat %s still blocked after %s", target, d)
	}
}

// Close stops sidecars, unmounts every target, stops the node plugin and the emulator,
// and removes the kubelet root. Every step is bounded.
func (e *Env) Close() {
	e.mu.Lock()
	sidecars, targets, offers := e.sidecars, e.targets, e.offers
	e.mu.Unlock()
	for _, o := range offers {
		o.Stop()
	}
	for _, s := range sidecars {
		_ = syscall.Kill(-s.Cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, t := range targets {
		_ = fusemount.Unmount(ctx, t, 100*time.Millisecond)
	}
	// The shared mounts outlive their targets (the node plugin's linger).
	if shared, err := fusemount.MountsUnder(filepath.Join(e.sharedDir(true), "mnt")); err == nil {
		for _, m := range shared {
			_ = fusemount.Unmount(ctx, m, 100*time.Millisecond)
		}
	}
	if e.conn != nil {
		e.conn.Close()
	}
	if e.nodeSrv != nil {
		e.nodeSrv.Stop()
	}
	if e.Emulator != nil && e.emulatorOwn {
		e.Emulator.Stop()
	}
	// Never RemoveAll through a mount: it would delete the bucket's objects.
	if left, err := fusemount.MountsUnder(e.Root); err == nil && len(left) == 0 {
		_ = os.RemoveAll(e.Root)
	} else {
		e.Log.Error("mounts left behind; not removing the kubelet root", "root", e.Root, "mounts", left, "err", err)
	}
}

// PodObject is the API object of the pod as a kubelet would report it: a legacy sidecar and
// one running app container using the volume, on node "test-node".
func (p *Pod) PodObject(restartPolicy corev1.RestartPolicy) *corev1.Pod {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + p.UID[:4], Namespace: "default", UID: types.UID(p.UID)},
		Spec: corev1.PodSpec{
			NodeName:      "test-node",
			RestartPolicy: restartPolicy,
			Containers:    []corev1.Container{{Name: contract.SidecarContainerName}, {Name: "app"}},
			Volumes:       []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: contract.SidecarContainerName, State: running},
			{Name: "app", State: running},
		}},
	}
}

// AppTerminated marks the pod's app container terminated with code at finishedAt.
func AppTerminated(pod *corev1.Pod, code int32, finishedAt time.Time) {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == "app" {
			pod.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: metav1.NewTime(finishedAt)}}
		}
	}
}
