package csidriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/ownership"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmounter"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sidecarmounter"
)

// Config is the node plugin's driver-level configuration.
type Config struct {
	NodeID string
	// KubeletRoot is the kubelet's root directory (/var/lib/kubelet).
	KubeletRoot string
	// SidecarUID and SidecarGID own hand-off sockets and the FUSE connection.
	SidecarUID, SidecarGID int
	// GCSEndpoint is a driver-level storage endpoint (an emulator); empty means real GCS.
	GCSEndpoint string
	// Pods, if set, lets NodePublishVolume refuse a pod that has no gcsfuse sidecar
	// (sidecarcheck.go) and give the files to the uid its containers run as (pkg/ownership);
	// nil: no check, and only the pod's fsGroup sets the owner.
	Pods PodLookup
	// MachineType is given to every gcsfuse as --machine-type unless the volume sets one
	// (see machinetype.go); empty: gcsfuse asks the GCE metadata server itself, until
	// SetMachineType gives one.
	MachineType string
	// Credentials configures Workload Identity Federation and the service account keys
	// volumes may bring (pkg/credentials); its zero value means Application Default
	// Credentials unless a volume says otherwise.
	Credentials credentials.Config
	// SidecarTmpPath, if set, says where the sidecar of the pod with the given UID sees its
	// gcsfuse-tmp emptyDir (the credential configuration points there). Nil means
	// contract.TmpMountPath, where the webhook mounts it; tests that run the sidecar on the
	// host's paths set it.
	SidecarTmpPath func(podUID string) string
	// UnmountBusyWait is how long a busy mount is retried before a lazy unmount.
	UnmountBusyWait time.Duration
	// StateDir keeps a record of each offer the sidecar has not taken yet, so that a
	// restarted node plugin can offer those volumes again (empty: no records).
	StateDir string
	// OnTerminating, if set, is called each time a sidecar reports handoff.StateTerminating
	// (once per volume): the kubelet is stopping the pod while containers may still use the
	// mounts, and only the node plugin can tell the sidecar when they have exited. It
	// returns whether this is the pod's first report, which records the SidecarDraining
	// Event (the node plugin's per-pod record knows; without a hook every report records
	// one). It is called from the volume's hand-off goroutine and must not block.
	OnTerminating func(pod PodRef) (first bool)
	// Metrics, if set, records volume readiness, failures and call durations (metrics.go).
	Metrics *Metrics
	// Proxy is the proxy every volume's gcsfuse goes through (pkg/netconf; zero: none). It
	// travels in the hand-off (Volume version 2) and reaches gcsfuse's environment only.
	Proxy netconf.Proxy
	// CABundle is an extra CA bundle (PEM) every volume's gcsfuse trusts besides the
	// system's roots (nil: none). It is written into each pod's emptyDir for its sidecar.
	CABundle []byte
	// SharedDir is where the shared mount mode keeps its mounts and the node mounter's
	// directory (pkg/sharedmounter); empty: no mounter, and shared volumes are refused.
	SharedDir string
	// MounterTmpPath is where the node's mounter sees its directory (SharedDir/mounter);
	// empty means contract.TmpMountPath, where the chart mounts it. Tests that run the
	// mounter on the host's paths set it.
	MounterTmpPath string
	// SharedLinger is how long a shared mount outlives the last pod that used it (0:
	// sharedmount.DefaultLinger; negative is refused).
	SharedLinger time.Duration
	// SharedOfferWait bounds the wait for the mounter to take a new shared mount (0:
	// sharedmounter.DefaultOfferWait; negative is refused): a publish whose mount it has not taken
	// by then fails, naming the mounter.
	SharedOfferWait time.Duration
	// SharedADC are the namespaces whose shared volumes may read with the mounter's
	// Application Default Credentials (credentials.SharedADC); the others' are refused with
	// PermissionDenied. Credentials.SharedProvider gives them the pod's own identity instead.
	SharedADC credentials.SharedADC
}

// PodRef names the pod a volume belongs to, for Events (nodevolume.PodRef).
type PodRef = nodevolume.PodRef

// EventSink records Events on pods. Implementations must not block (nodevolume.EventSink).
type EventSink = nodevolume.EventSink

// NodeServer is the CSI Node service: it validates each call, serialises the calls on a
// target, answers the kubelet's repeated calls from the store, and hands the rest to the
// mounter of the volume's mode (mounter.go): pkg/sidecarmounter, or pkg/sharedmounter when
// the node has the shared mode.
type NodeServer struct {
	csi.UnimplementedNodeServer
	cfg Config
	log *slog.Logger

	// sidecarMounter and sharedMounter (nil without Config.SharedDir) serve the two modes;
	// sidecar and shared are the same two, for what only they do (recovery, clean-up,
	// metrics). lookup says what is mounted at a target.
	sidecarMounter, sharedMounter nodevolume.Mounter
	sidecar                       *sidecarmounter.Mounter
	shared                        *sharedmounter.Mounter
	lookup                        mountLookup

	// store is what the process knows of its targets: calls in flight, publications,
	// offers, shared plans (nodevolume.Store).
	store nodevolume.Store

	// machineType is Config.MachineType, or what SetMachineType set since.
	machineType atomic.Pointer[string]
}

// DefaultSharedOfferWait bounds the wait for the node's mounter to take a new shared
// mount (Config.SharedOfferWait's default; sharedmounter.DefaultOfferWait).
const DefaultSharedOfferWait = sharedmounter.DefaultOfferWait

// DefaultUnmountBusyWait is how long a busy mount is retried before a lazy unmount.
const DefaultUnmountBusyWait = 2 * time.Second

// Validate reports the first thing wrong with cfg, so that a node plugin started with a bad
// flag fails at start with a message naming it, not at the first pod.
func (cfg Config) Validate() error {
	switch {
	case cfg.NodeID == "":
		return errors.New("node ID is empty")
	case !filepath.IsAbs(cfg.KubeletRoot):
		return fmt.Errorf("kubelet root %q is not an absolute path", cfg.KubeletRoot)
	case cfg.SidecarUID < 0 || cfg.SidecarGID < 0:
		return fmt.Errorf("sidecar uid/gid %d/%d: must not be negative", cfg.SidecarUID, cfg.SidecarGID)
	case cfg.UnmountBusyWait < 0:
		return fmt.Errorf("unmount busy wait %s is negative", cfg.UnmountBusyWait)
	case cfg.StateDir != "" && !filepath.IsAbs(cfg.StateDir):
		return fmt.Errorf("state directory %q is not an absolute path", cfg.StateDir)
	case cfg.SharedDir != "" && !filepath.IsAbs(cfg.SharedDir):
		return fmt.Errorf("shared directory %q is not an absolute path", cfg.SharedDir)
	case cfg.SharedLinger < 0:
		return fmt.Errorf("shared linger %s is negative", cfg.SharedLinger)
	case cfg.SharedOfferWait < 0:
		return fmt.Errorf("shared offer wait %s is negative", cfg.SharedOfferWait)
	}
	if err := cfg.Credentials.WithDefaults().Validate(); err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	if cfg.GCSEndpoint != "" {
		u, err := url.Parse(cfg.GCSEndpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("GCS endpoint %q: want an http(s)://host[:port]/... URL", cfg.GCSEndpoint)
		}
	}
	if cfg.MachineType != "" {
		if _, err := mountopts.Parse([]string{"machine-type=" + cfg.MachineType}); err != nil {
			return fmt.Errorf("machine type: %w", err)
		}
	}
	if err := cfg.Proxy.Validate(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if cfg.CABundle != nil {
		if _, err := netconf.ParseCABundle(cfg.CABundle); err != nil {
			return err
		}
	}
	return nil
}

// mounterDeps are what the node service gives both mounters besides its Config.
type mounterDeps struct {
	store   nodevolume.Store
	files   *nodevolume.Files
	metrics nodevolume.StatusRecorder
	events  EventSink
	log     *slog.Logger
	unbound func(target string) // the shared mounter's: a target it does not bind
}

// filesConfig, sidecarConfig and sharedConfig are the parts of cfg each piece of the node
// service is given, one function each so that a test can check every field lands where it
// belongs (a wait given as another, a uid as the gid, shows nowhere else without root).
func filesConfig(cfg Config, log *slog.Logger) nodevolume.Files {
	var mounterDir string
	if cfg.SharedDir != "" {
		mounterDir = sharedmounter.MounterDir(cfg.SharedDir)
	}
	return nodevolume.Files{KubeletRoot: cfg.KubeletRoot, MounterDir: mounterDir,
		UID: cfg.SidecarUID, GID: cfg.SidecarGID, CABundle: cfg.CABundle, Log: log}
}

func sidecarConfig(cfg Config, d mounterDeps) sidecarmounter.Config {
	return sidecarmounter.Config{
		UID: cfg.SidecarUID, GID: cfg.SidecarGID, UnmountBusyWait: cfg.UnmountBusyWait, StateDir: cfg.StateDir,
		OnTerminating: cfg.OnTerminating, Pods: cfg.Pods, Store: d.store, Files: d.files, Metrics: d.metrics, Events: d.events, Log: d.log,
	}
}

func sharedConfig(cfg Config, d mounterDeps) sharedmounter.Config {
	return sharedmounter.Config{
		Dir: cfg.SharedDir, MounterTmpPath: cfg.MounterTmpPath, KubeletRoot: cfg.KubeletRoot,
		UID: cfg.SidecarUID, GID: cfg.SidecarGID, UnmountBusyWait: cfg.UnmountBusyWait,
		Linger: cfg.SharedLinger, OfferWait: cfg.SharedOfferWait, ADC: cfg.SharedADC,
		Credentials: cfg.Credentials.ForShared(), Pods: cfg.Pods,
		Store: d.store, Files: d.files, Metrics: d.metrics, Events: d.events, Log: d.log,
		Unbound: d.unbound,
	}
}

// NewNodeServer validates cfg and returns a Node service. events and log may be nil.
func NewNodeServer(cfg Config, events EventSink, log *slog.Logger) (*NodeServer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node service: %w", err)
	}
	if cfg.UnmountBusyWait == 0 {
		cfg.UnmountBusyWait = DefaultUnmountBusyWait
	}
	cfg.Credentials = cfg.Credentials.WithDefaults()
	if cfg.MounterTmpPath == "" {
		cfg.MounterTmpPath = contract.TmpMountPath
	}
	if cfg.SidecarTmpPath == nil {
		cfg.SidecarTmpPath = func(string) string { return contract.TmpMountPath }
	}
	if log == nil {
		log = slog.Default()
	}
	ns := &NodeServer{cfg: cfg, log: log, store: nodevolume.NewStore(), lookup: fusemount.Lookup}
	ns.machineType.Store(&cfg.MachineType)
	files, err := nodevolume.NewFiles(filesConfig(cfg, log))
	if err != nil {
		return nil, fmt.Errorf("node service: %w", err)
	}
	// A nil *Metrics records nothing; the mounters are given no recorder then.
	var metrics nodevolume.StatusRecorder
	if cfg.Metrics != nil {
		metrics = cfg.Metrics
	}
	deps := mounterDeps{store: ns.store, files: files, metrics: metrics, events: events, log: log}
	ns.sidecar, err = sidecarmounter.New(sidecarConfig(cfg, deps))
	if err != nil {
		return nil, fmt.Errorf("node service: %w", err)
	}
	ns.sidecarMounter = ns.sidecar
	if cfg.SharedDir != "" {
		// A target it does not bind (it never is: the caller asked Owns under the target's
		// lock) is cleaned up as any other: its offer record and files.
		deps.unbound = ns.sidecar.Forget
		ns.shared, err = sharedmounter.New(sharedConfig(cfg, deps))
		if err != nil {
			return nil, fmt.Errorf("node service: %w", err)
		}
		ns.sharedMounter = ns.shared
	}
	return ns, nil
}

// lock serialises operations on one target; a concurrent call gets Aborted and the kubelet
// retries it, which is what CSI asks for.
func (s *NodeServer) lock(target string) (func(), error) { return s.store.Begin(target) }

func (s *NodeServer) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.cfg.NodeID}, nil
}

// withoutOwnership returns flags without pkg/ownership's flags.
func withoutOwnership(flags []string) []string {
	return slices.DeleteFunc(slices.Clone(flags), ownership.Owned)
}

// NodeGetCapabilities advertises VOLUME_MOUNT_GROUP: the kubelet then passes the pod's
// fsGroup as volume_mount_group instead of changing the files' group itself (which it
// cannot on a bucket), and the mount is made group-writable for it (pkg/ownership). There
// is no staging step, since a FUSE mount is per pod.
func (s *NodeServer) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{{
		Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP}},
	}}}, nil
}

func readOnlyAccess(m csi.VolumeCapability_AccessMode_Mode) (ro bool, ok bool) {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		return true, true
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER, csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:
		return false, true
	}
	return false, false
}

func (s *NodeServer) validatePublish(req *csi.NodePublishVolumeRequest) (*nodevolume.Request, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	vc := req.GetVolumeCapability()
	if vc == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if err := mountopts.CheckAccessType(vc.GetBlock() != nil, vc.GetMount().GetFsType()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	mnt := vc.GetMount()
	if mnt == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability: mount access type is required")
	}
	roAccess, ok := readOnlyAccess(vc.GetAccessMode().GetMode())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "volume_capability.access_mode %v is not supported", vc.GetAccessMode().GetMode())
	}
	target, err := podfiles.ParseTarget(s.cfg.KubeletRoot, req.GetTargetPath())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "target_path: %v", err)
	}
	if !contract.ValidVolumeName(target.VolumeName) {
		return nil, status.Errorf(codes.InvalidArgument, "target_path: volume name %q: want a DNS-1123 label or subdomain (a pod volume's or a PersistentVolume's name) of at most %d characters", target.VolumeName, contract.MaxVolumeNameLen)
	}
	attrs := req.GetVolumeContext()
	if uid := attrs[contract.CtxPodUID]; uid != "" && uid != target.PodUID {
		return nil, status.Errorf(codes.InvalidArgument, "volume_context %s %q does not match target_path pod %q", contract.CtxPodUID, uid, target.PodUID)
	}
	fallback := req.GetVolumeId()
	if attrs[contract.CtxEphemeral] == "true" {
		fallback = "" // an inline volume's ID is generated by the kubelet, never a bucket
	}
	opts, err := mountopts.FromAttributes(attrs, mnt.GetMountFlags(), fallback)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: %v", target.VolumeName, err)
	}
	creds := s.cfg.Credentials
	if opts.Shared {
		creds = creds.ForShared() // the shared provider where no node-wide one is set
	}
	plan, err := credentials.Build(creds, credentials.Request{
		Volume: target.VolumeName, Bucket: opts.Bucket, Attributes: attrs, Secrets: req.GetSecrets(),
		SidecarTokenFile: podfiles.At(s.cfg.SidecarTmpPath(target.PodUID)).CredentialsTokenFile(target.VolumeName),
	})
	if err != nil {
		code := codes.InvalidArgument
		var ce *credentials.Error
		if errors.As(err, &ce) && ce.Precondition {
			code = codes.FailedPrecondition
		}
		return nil, status.Error(code, err.Error())
	}
	r := &nodevolume.Request{
		Target: target,
		Pod:    PodRef{Namespace: attrs[contract.CtxPodNamespace], Name: attrs[contract.CtxPodName], UID: target.PodUID},
		Opts:   opts,
		Creds:  plan,
		Volume: handoff.Volume{
			Version:    handoff.Version,
			VolumeName: target.VolumeName,
			Bucket:     opts.Bucket,
			ReadOnly:   req.GetReadonly() || roAccess || opts.ReadOnly,
			Flags:      nodevolume.WithMachineType(opts.Flags, *s.machineType.Load()),
			Endpoint:   s.cfg.GCSEndpoint,
			KeyFile:    plan.KeyFile(),
			Identity:   plan.Identity,
			HTTPSProxy: s.cfg.Proxy.HTTPS,
			HTTPProxy:  s.cfg.Proxy.HTTP,
			NoProxy:    s.cfg.Proxy.NoProxy,
			CABundle:   s.cfg.CABundle != nil,
		},
	}
	// Version 1 unless the volume carries a proxy or a CA: a sidecar of the previous
	// release takes every volume it can (docs/upgrade.md).
	r.Volume.Version = r.Volume.NeededVersion()
	return r, nil
}

// NodePublishVolume mounts the target with a fresh FUSE connection and offers it to the
// pod's sidecar on a socket in the pod's gcsfuse-tmp emptyDir. It returns as soon as the
// mount exists: the sidecar may not be running yet (a native sidecar starts after volumes
// are set up), and the kernel holds file system calls until gcsfuse answers.
func (s *NodeServer) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (_ *csi.NodePublishVolumeResponse, err error) {
	defer func(start time.Time) { s.cfg.Metrics.call("NodePublishVolume", start, err) }(time.Now())
	r, err := s.validatePublish(req)
	if err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	unlock, err := s.lock(target)
	if err != nil {
		return nil, err
	}
	defer unlock()
	log := s.log.With("pod", r.Pod.Namespace+"/"+r.Pod.Name, "podUID", r.Pod.UID, "volume", r.Target.VolumeName, "bucket", r.Volume.Bucket,
		"credentials", r.Creds)

	existing, err := s.lookup(target)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "check mount at %s: %v", target, err)
	}
	if existing != nil {
		return s.republish(ctx, req, r, existing, log)
	}
	m, err := s.mounterFor(r)
	if err != nil {
		return nil, err
	}
	if err := m.Admit(r); err != nil {
		log.Warn("refusing the mount", "err", err)
		return nil, err
	}
	pod, err := s.checkSidecar(ctx, r.Pod, m.NeedsSidecar())
	if err != nil {
		log.Warn("refusing the mount", "err", err)
		return nil, err
	}
	flags, why, err := addOwnership(req, r, pod)
	if err != nil {
		return nil, err
	}
	if len(flags) > 0 {
		log.Info("mount owned for the pod's user", "flags", flags, "why", why)
	}
	if err := m.Publish(ctx, req, r, log); err != nil {
		return nil, err
	}
	s.remember(target, req.GetVolumeId(), r.Volume)
	return &csi.NodePublishVolumeResponse{}, nil
}

// addOwnership adds to r's flags those that give the mount to the pod's user
// (pkg/ownership), as a publish decides them, and returns them and why.
func addOwnership(req *csi.NodePublishVolumeRequest, r *nodevolume.Request, pod *corev1.Pod) ([]string, string, error) {
	owner, err := ownership.Decide(r.Volume.Flags, ownership.Request{
		MountGroup: req.GetVolumeCapability().GetMount().GetVolumeMountGroup(), Pod: pod,
		Volume: r.Target.VolumeName, Skip: contract.SidecarContainerName,
	})
	if err != nil {
		return nil, "", status.Errorf(codes.InvalidArgument, "volume %s: %v", r.Target.VolumeName, err)
	}
	if len(owner.Flags) > 0 {
		r.Volume.Flags = append(slices.Clip(r.Volume.Flags), owner.Flags...)
	}
	return owner.Flags, owner.Reason, nil
}

// applyOwnership is addOwnership for a republish, with the pod from the node plugin's cache
// when it has one; a failure leaves r as it was (the republish itself does not need it).
func (s *NodeServer) applyOwnership(req *csi.NodePublishVolumeRequest, r *nodevolume.Request, log *slog.Logger) {
	var pod *corev1.Pod
	if s.cfg.Pods != nil && r.Pod.UID != "" {
		pod, _ = s.cfg.Pods(r.Pod.UID)
	}
	if _, _, err := addOwnership(req, r, pod); err != nil {
		log.Warn("cannot decide the mount's owner at the republish", "err", err)
	}
}

// sameVolume compares a republished volume with the published one. The identity's wording
// is left out: a rotated key (a new key ID in the same Secret) is the same volume, and
// its new file is written. So is the volume's name, which the target path already fixes: a
// shared volume is published under its sharing key's name, and a republish, which has not
// chosen the key yet, carries the pod's volume name.
func sameVolume(a, b handoff.Volume) bool {
	a.Identity, b.Identity = "", ""
	a.VolumeName, b.VolumeName = "", ""
	// The driver's --machine-type may have been learnt between the publish and now, and
	// the ownership flags depend on a pod the first publish may not have known yet.
	a.Flags, b.Flags = withoutOwnership(nodevolume.WithoutMachineType(a.Flags)), withoutOwnership(nodevolume.WithoutMachineType(b.Flags))
	return reflect.DeepEqual(a, b)
}

// republish answers a publish of a target that is already mounted: the same volume is a
// success (CSI idempotency), anything else is AlreadyExists. With requiresRepublish the
// kubelet calls it periodically with a fresh service account token: the credential files
// are rewritten (when they changed) and the running mount is left alone; gcsfuse reads
// the token file again at each token exchange.
func (s *NodeServer) republish(ctx context.Context, req *csi.NodePublishVolumeRequest, r *nodevolume.Request, m *fusemount.Info, log *slog.Logger) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	pub, known := s.store.Publication(target)
	// The mode is part of the volume: a target the other mode published is another volume
	// (a shared volume on a node without the shared mode wants no mounter: another too).
	owner := s.mounterOf(target)
	want, _ := s.mounterFor(r)
	sameMode := want != nil && want.Mode() == owner.Mode()
	if known {
		if pub.VolumeID != req.GetVolumeId() || !sameVolume(pub.Volume, r.Volume) || !sameMode {
			return nil, status.Errorf(codes.AlreadyExists, "target %s is already published with a different volume or options", target)
		}
	} else if m.FSType != fusemount.FSType || m.Source != r.Volume.Bucket || m.ReadOnly != r.Volume.ReadOnly || !sameMode {
		// Published before this process started: all we can compare is what mountinfo shows.
		return nil, status.Errorf(codes.AlreadyExists, "target %s is already mounted (%s from %q, ro=%v)", target, m.FSType, m.Source, m.ReadOnly)
	}
	if !known {
		// Not published by this process: the sidecar mounter may mount it again (a dead
		// mount, its sidecar gone while the node plugin was down), and must give it the
		// owner a first publish gives.
		s.applyOwnership(req, r, log)
	}
	w, err := owner.Refresh(ctx, req, r)
	if err != nil {
		return nil, err
	}
	if w.Token || w.Config {
		log.Info("republished: credentials refreshed", "token", w.Token, "config", w.Config, "tokenExpiry", r.Creds.TokenExpiry)
	} else {
		log.Debug("republished: same volume, credentials unchanged")
	}
	if !known {
		log.Info("volume already mounted (published before this node plugin started)")
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume stops the offer, unmounts (lazily if still busy after a bounded
// wait) and removes the target. A target that is absent or not mounted is a success.
func (s *NodeServer) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (_ *csi.NodeUnpublishVolumeResponse, err error) {
	defer func(start time.Time) { s.cfg.Metrics.call("NodeUnpublishVolume", start, err) }(time.Now())
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "target_path is required")
	}
	unlock, err := s.lock(target)
	if err != nil {
		return nil, err
	}
	defer unlock()

	start := time.Now()
	log := s.log.With("target", target)
	if err := s.mounterOf(target).Unpublish(ctx, target, log); err != nil {
		return nil, err
	}
	s.store.Forget(target)
	log.Info("volume unpublished", "ms", time.Since(start).Milliseconds())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// remember records a published target, to answer its repeated calls.
func (s *NodeServer) remember(target, volumeID string, vol handoff.Volume) {
	s.store.Remember(target, nodevolume.Publication{VolumeID: volumeID, Volume: vol})
}

// Close stops the shared mounts' timers; the mounts keep serving (a restarted node plugin
// finds them, RecoverShared).
func (s *NodeServer) Close() {
	if s.shared != nil {
		s.shared.Close()
	}
}

// SidecarEnded is told that pod's sidecar container ended non-zero: the offers a sidecar
// that will not come back never took are answered with I/O errors
// (sidecarmounter.Mounter.SidecarEnded).
func (s *NodeServer) SidecarEnded(pod *corev1.Pod) { s.sidecar.SidecarEnded(pod) }

// RecoverOffers offers again, at start-up, the volumes whose offer a previous node plugin
// recorded and its sidecar never took (sidecarmounter.Mounter.Recover). Returns how many.
func (s *NodeServer) RecoverOffers(ctx context.Context) (int, error) { return s.sidecar.Recover(ctx) }

// RecoverShared finds the shared mounts a previous node plugin made and the targets that
// bind them (sharedmounter.Mounter.Recover); nothing without the shared mode. Called before
// the gRPC server serves.
func (s *NodeServer) RecoverShared() (int, error) {
	if s.shared == nil {
		return 0, nil
	}
	return s.shared.Recover()
}

// CleanUpShared removes the shared directory when nothing on the node uses it any more
// (sharedmounter.Mounter.CleanUp) and reports whether it did; false without the shared
// mode. Called by a stopping node plugin once its gRPC server has stopped.
func (s *NodeServer) CleanUpShared() bool { return s.shared != nil && s.shared.CleanUp() }

// SharedMetrics is the shared mounts' view for metrics (sharedmounter.Mounter.Metrics); ok
// false without the shared mode.
func (s *NodeServer) SharedMetrics() (dir string, keys func() []string, users prometheus.Collector, ok bool) {
	if s.shared == nil {
		return "", nil, nil, false
	}
	dir, keys, users = s.shared.Metrics()
	return dir, keys, users, true
}
