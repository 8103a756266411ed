package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// sanityFilter keeps the controller services' specs out ("[Controller Server]": controller,
// snapshots, expansion, modification, controller volume health). The driver has no
// controller service: against the test's provisioner they would test the fixture, and
// against the driver only "Unimplemented".
const sanityFilter = `\[Controller Server\]`

// sanitySkips are the skips a spec may report here, by the suite's message, each with why
// it is right for this driver. Any other skip fails TestSanity, and so does an entry that
// no spec reports any more.
var sanitySkips = map[string]string{
	"Controller Service not provided: CreateVolume not supported": `Node Service "should work" and "should be idempotent": ` +
		`the suite runs them only for a plugin that advertises a controller service (CreateVolume, ControllerPublishVolume ` +
		`around the node calls), and this driver is node-only (buckets exist before volumes do)`,
	"GroupControllerService not supported": "no group controller service (volume group snapshots)",
	"NodeStageVolume not supported":        "no STAGE_UNSTAGE_VOLUME: a FUSE mount belongs to one pod, nothing is staged per node",
	"NodeUnstageVolume not supported":      "no STAGE_UNSTAGE_VOLUME (as above)",
	"NodeGetVolume not supported":          "no GET_VOLUME_STATS: a bucket has no capacity or inode count to report",
	"NodeExpandVolume not supported":       "no EXPAND_VOLUME: a bucket has no size to expand",
	"NodeGetVolumeHealth not supported":    "no GET_VOLUME_HEALTH: a failed gcsfuse is reported as a pod Event (GcsfuseExited)",
	"NodeGetStorageHealth not supported":   "no GET_STORAGE_HEALTH: the storage is GCS, not a device of the node",
	"Service does not have single node multi writer capability": "no SINGLE_NODE_MULTI_WRITER: the kubelet then " +
		"sends SINGLE_NODE_WRITER even for ReadWriteOncePod, and a bucket is shared by design",
}

// sanityVolume is the volume name in the pod trees the test makes (".../kubernetes.io~csi/<name>").
const sanityVolume = "sanity"

// TestSanity runs csi-sanity (kubernetes-csi/csi-test v5) against the node plugin: the
// Identity service and the whole Node suite, NodePublishVolume/NodeUnpublishVolume included,
// with real FUSE mounts served by the real sidecar and gcsfuse against the emulator.
//
// csi-sanity expects a controller to create volumes and publishes to "<TargetPath>/target",
// while this driver is node-only and accepts only the kubelet's layout. The test plays the
// rest of a cluster: a provisioner (sanityProvisioner) and a kubelet (sanityKubelet), both
// on the client side of the connection to the node plugin, which is the only CSI endpoint.
// What the suite skips is checked against sanitySkips, so that no spec is skipped silently.
func TestSanity(t *testing.T) {
	e := newEnv(t)
	k := &sanityKubelet{env: e, t: t, pods: map[string]*sanityPod{}, prov: &sanityProvisioner{buckets: map[string]bool{}}}

	cfg := sanity.NewTestConfig()
	cfg.Address = e.Endpoint
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithUnaryInterceptor(k.intercept))
	cfg.TargetPath = e.Root // only handed to CreateTargetDir, which makes a pod tree under it
	cfg.CreateTargetDir = k.createTarget
	cfg.RemoveTargetPath = k.removeTarget
	cfg.CheckPath = k.checkPath
	cfg.StagingPath = "" // the node does not stage: no staging directory
	// Like a StorageClass parameter: the provisioner passes it on as a volume attribute.
	cfg.TestVolumeParameters = map[string]string{contract.AttrMountOptions: "implicit-dirs"}

	var report ginkgo.Report
	ginkgo.ReportAfterSuite("csi-sanity skips", func(r ginkgo.Report) { report = r })
	// sanity.Test, with the filter added to the suite's configuration (command-line
	// -ginkgo.* flags still apply).
	sc := sanity.GinkgoTest(&cfg)
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, reporter := ginkgo.GinkgoConfiguration()
	narrowed := len(suite.FocusStrings)+len(suite.SkipStrings)+len(suite.FocusFiles)+len(suite.SkipFiles) > 0 || suite.LabelFilter != ""
	suite.SkipStrings = append(suite.SkipStrings, sanityFilter)
	ginkgo.RunSpecs(t, "csi-sanity", suite, reporter)
	sc.Finalize()
	if narrowed {
		t.Log("skips not checked against sanitySkips: -ginkgo flags chose the specs")
		return
	}
	checkSanitySkips(t, report)
}

// checkSanitySkips fails t for a spec skipped for a reason sanitySkips does not give (or
// filtered out by something else than sanityFilter), and for a sanitySkips entry no spec
// used.
func checkSanitySkips(t *testing.T, r ginkgo.Report) {
	t.Helper()
	filter := regexp.MustCompile(sanityFilter)
	used := map[string]bool{}
	passed, skipped := 0, 0
	for _, s := range r.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		switch s.State {
		case types.SpecStatePassed:
			passed++
			continue
		case types.SpecStateSkipped, types.SpecStatePending:
			skipped++
		default:
			continue // failures are the suite's to report
		}
		if s.Failure.Message == "" && filter.MatchString(s.FullText()) {
			continue
		}
		if _, ok := sanitySkips[s.Failure.Message]; !ok {
			t.Errorf("csi-sanity spec %q was %s (%q), which sanitySkips does not allow", s.FullText(), s.State, s.Failure.Message)
		}
		used[s.Failure.Message] = true
	}
	for msg := range sanitySkips {
		if !used[msg] {
			t.Errorf("no csi-sanity spec skipped with %q: remove it from sanitySkips", msg)
		}
	}
	t.Logf("csi-sanity: %d specs passed, %d skipped or filtered (each for a reason in sanityFilter or sanitySkips)", passed, skipped)
}

// sanityProvisioner answers the CreateVolume and DeleteVolume calls of the suite (through
// sanityKubelet.intercept, on the node plugin's connection): a volume is a new bucket in the
// emulator, its name the volume ID. It stands in for whoever makes the buckets a
// PersistentVolume names; the driver itself still serves and advertises no controller
// service, so the suite tests no controller.
type sanityProvisioner struct {
	mu      sync.Mutex
	buckets map[string]bool
}

// CreateVolume makes a bucket named after the request (bucket names are lower case) and
// returns the StorageClass-like parameters as the volume's attributes.
func (p *sanityProvisioner) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	bucket := strings.ToLower(req.GetName())
	emu.CreateBucketWithOpts(fakestorageBucket(bucket))
	p.mu.Lock()
	p.buckets[bucket] = true
	p.mu.Unlock()
	attrs := map[string]string{contract.AttrBucketName: bucket}
	for k, v := range req.GetParameters() {
		attrs[k] = v
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: bucket, VolumeContext: attrs}}, nil
}

// DeleteVolume removes the volume's bucket, which must be empty; an unknown volume is gone
// already.
func (p *sanityProvisioner) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.buckets[req.GetVolumeId()] {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err := emu.Backend().DeleteBucket(req.GetVolumeId()); err != nil {
		return nil, status.Errorf(codes.Internal, "delete bucket %s: %v", req.GetVolumeId(), err)
	}
	delete(p.buckets, req.GetVolumeId())
	return &csi.DeleteVolumeResponse{}, nil
}

// sanityKubelet plays the kubelet around each spec:
//   - intercept hands CreateVolume and DeleteVolume to the provisioner;
//   - CreateTargetDir admits a pod: its tree with the gcsfuse-tmp emptyDir and the volume's
//     directory ".../kubernetes.io~csi/sanity", which it returns as the suite's TargetPath;
//   - intercept renames the last element of the suite's "<TargetPath>/target" to the
//     kubelet's "mount" (nothing else of the path changes), adds the pod's information as
//     for podInfoOnMount, and starts the pod's sidecar after the first successful
//     NodePublishVolume, as the kubelet starts containers once the volumes are set up;
//   - CheckPath looks at the renamed path; a mount there must be gcsfuse's and must serve;
//   - RemoveTargetPath ends the pod: the exit file stops the sidecar, which must exit 0
//     (no gcsfuse failed), and no mount may be left in the pod's tree.
type sanityKubelet struct {
	env  *testenv.Env
	t    *testing.T
	prov *sanityProvisioner
	mu   sync.Mutex
	pods map[string]*sanityPod // by the suite's target path "<TargetPath>/target"
}

type sanityPod struct {
	pod     *testenv.Pod
	sidecar *testenv.Sidecar
}

func (k *sanityKubelet) createTarget(string) (string, error) {
	pod, err := k.env.NewPod()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(pod.Target(sanityVolume))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	k.mu.Lock()
	k.pods[filepath.Join(dir, "target")] = &sanityPod{pod: pod}
	k.mu.Unlock()
	return dir, nil
}

// lookup returns the pod whose suite target path is path, and the kubelet's target path for
// it; for any other path, nil and path itself.
func (k *sanityKubelet) lookup(path string) (*sanityPod, string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.pods[path]; p != nil {
		return p, p.pod.Target(sanityVolume)
	}
	return nil, path
}

func (k *sanityKubelet) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch r := req.(type) {
	case *csi.CreateVolumeRequest:
		resp, err := k.prov.CreateVolume(ctx, r)
		if err == nil {
			proto.Merge(reply.(proto.Message), resp)
		}
		return err
	case *csi.DeleteVolumeRequest:
		resp, err := k.prov.DeleteVolume(ctx, r)
		if err == nil {
			proto.Merge(reply.(proto.Message), resp)
		}
		return err
	case *csi.NodePublishVolumeRequest:
		p, target := k.lookup(r.GetTargetPath())
		if p == nil {
			break
		}
		r = proto.Clone(r).(*csi.NodePublishVolumeRequest)
		r.TargetPath = target
		if r.VolumeContext == nil {
			r.VolumeContext = map[string]string{}
		}
		r.VolumeContext[contract.CtxPodUID] = p.pod.UID
		r.VolumeContext[contract.CtxPodName] = "sanity-" + p.pod.UID[:8]
		r.VolumeContext[contract.CtxPodNamespace] = "default"
		r.VolumeContext[contract.CtxEphemeral] = "false"
		if err := invoker(ctx, method, r, reply, cc, opts...); err != nil {
			return err
		}
		if p.sidecar == nil {
			sc, err := p.pod.StartSidecar(contract.ModeLegacy, 30, echo(k.t))
			if err != nil {
				return fmt.Errorf("kubelet fixture: %w", err)
			}
			p.sidecar = sc
		}
		return nil
	case *csi.NodeUnpublishVolumeRequest:
		if p, target := k.lookup(r.GetTargetPath()); p != nil {
			r = proto.Clone(r).(*csi.NodeUnpublishVolumeRequest)
			r.TargetPath = target
			req = r
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (k *sanityKubelet) checkPath(path string) (sanity.PathKind, error) {
	p, target := k.lookup(path)
	m, err := fusemount.Lookup(target)
	if err != nil {
		return "", err
	}
	if m != nil {
		if m.FSType != fusemount.FSType {
			return "", fmt.Errorf("%s is a %s mount, want %s", target, m.FSType, fusemount.FSType)
		}
		if _, err := testenv.WaitReady(target, 20*time.Second); err != nil {
			out := ""
			if p != nil && p.sidecar != nil {
				out = p.sidecar.Output()
			}
			return "", fmt.Errorf("mounted, but gcsfuse does not serve it: %w\nsidecar output:\n%s", err, out)
		}
		return sanity.PathIsDir, nil
	}
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return sanity.PathIsNotFound, nil
	case err != nil:
		return "", err
	case fi.Mode().IsDir():
		return sanity.PathIsDir, nil
	case fi.Mode().IsRegular():
		return sanity.PathIsFile, nil
	}
	return sanity.PathIsOther, nil
}

// removeTarget ends the pod of the suite's TargetPath dir. csi-sanity ignores what it
// returns, so a problem fails the spec instead.
func (k *sanityKubelet) removeTarget(dir string) error {
	key := filepath.Join(dir, "target")
	p, _ := k.lookup(key)
	if p == nil {
		ginkgo.Fail(fmt.Sprintf("kubelet fixture: RemoveTargetPath(%q): no pod made there", dir))
		return nil
	}
	k.mu.Lock()
	delete(k.pods, key)
	k.mu.Unlock()
	var errs []error
	if p.sidecar != nil {
		if err := podfiles.Write(k.env.Root, p.pod.UID, podfiles.Reason{Rule: "sanity"}); err != nil {
			errs = append(errs, err)
		} else if code, err := p.sidecar.Wait(10 * time.Second); err != nil || code != 0 {
			errs = append(errs, fmt.Errorf("sidecar exit %d, %v; want 0 (no gcsfuse failure)\n%s", code, err, p.sidecar.Output()))
		}
	}
	podDir := podfiles.PodDir(k.env.Root, p.pod.UID)
	left, err := fusemount.MountsUnder(podDir)
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("mounts left in the pod's tree after NodeUnpublishVolume: %v", left))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for _, m := range left {
			_ = fusemount.Unmount(ctx, m, 100*time.Millisecond)
		}
		cancel()
		left, err = fusemount.MountsUnder(podDir)
	}
	switch {
	case err != nil:
		errs = append(errs, err)
	case len(left) == 0: // never RemoveAll through a mount: it would delete the bucket's objects
		errs = append(errs, os.RemoveAll(podDir))
	}
	if err := errors.Join(errs...); err != nil {
		ginkgo.Fail("kubelet fixture: " + err.Error())
	}
	return nil
}
