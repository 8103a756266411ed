package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/firstseen"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// nodeProcess runs the real node plugin binary on the test's kubelet root.
type nodeProcess struct {
	cmd  *exec.Cmd
	conn *grpc.ClientConn
	csi  csi.NodeClient
}

func startNode(t *testing.T, bin string, e *testenv.Env) *nodeProcess {
	t.Helper()
	sock := filepath.Join(e.Root, "node.sock")
	_ = os.Remove(sock) // a killed plugin leaves its socket; wait for the new one
	cmd := exec.Command(bin, "--endpoint=unix://"+sock, "--node-id=test-node", "--kubelet-root="+e.Root,
		"--gcs-endpoint="+e.Emulator.Endpoint, "--watch-pods=false")
	if w := echo(t); w != nil {
		cmd.Stdout, cmd.Stderr = w, w
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node plugin socket did not appear")
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &nodeProcess{cmd: cmd, conn: conn, csi: csi.NewNodeClient(conn)}
}

// The node plugin is killed after NodePublishVolume and before the sidecar took the
// descriptor (a DaemonSet rollout while a pod's images are still pulling). The kubelet will
// not publish again; the restarted node plugin must offer the volume anew, and the sidecar
// must serve it, whether it starts after the re-offer or is already watching the hand-off
// directory when the re-offer appears (then it connects the moment it sees the name, so the
// socket must already be its own: bound under a hidden name, chowned, renamed into place).
func TestNodePluginRestartBeforeSidecarConnects(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gcsfuse-csi-node")
	if err := testenv.GoBuild(bin, "./cmd/gcsfuse-csi-node"); err != nil {
		t.Fatalf("build node plugin: %v", err)
	}
	for _, tc := range []struct {
		name          string
		sidecarBefore bool // the sidecar runs and watches before the node plugin restarts
	}{
		{name: "sidecar starts after the re-offer"},
		{name: "sidecar watches during the re-offer", sidecarBefore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restartBeforeSidecarConnects(t, bin, tc.sidecarBefore)
		})
	}
}

// publishThroughNode starts the node plugin bin in a new environment with bucket and
// publishes a pod's volume "data" of it through the plugin's CSI socket.
func publishThroughNode(t *testing.T, bin, bucket string) (*testenv.Env, *testenv.Pod, *csi.NodePublishVolumeRequest, *nodeProcess) {
	t.Helper()
	e := newEnv(t, bucket)
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := pod.PublishRequest("data", bucket, "", false)
	if err := os.MkdirAll(filepath.Dir(req.TargetPath), 0o750); err != nil {
		t.Fatal(err)
	}
	node := startNode(t, bin, e)
	if _, err := node.csi.NodePublishVolume(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	// A test that fails before its unpublish leaves no mount behind.
	t.Cleanup(func() { _ = unix.Unmount(req.TargetPath, unix.MNT_DETACH) })
	return e, pod, req, node
}

func restartBeforeSidecarConnects(t *testing.T, bin string, sidecarBefore bool) {
	bucket := "bkt-restart"
	if sidecarBefore {
		bucket = "bkt-restart-watching"
	}
	e, pod, req, first := publishThroughNode(t, bin, bucket)
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.cmd.Wait()
	if _, err := os.Stat(req.TargetPath); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after the node plugin died the mount should be dead (ENOTCONN), stat = %v", err)
	}

	handoffDir := podfiles.At(pod.TmpDir).HandoffDir()
	sockName := podfiles.HandoffSocketName("data")
	var sc *testenv.Sidecar
	var err error
	if sidecarBefore {
		if sc, err = pod.StartSidecar(contract.ModeLegacy, 30, echo(t)); err != nil {
			t.Fatal(err)
		}
		// The dead plugin's socket is still there: the sidecar tries it, is refused, and
		// keeps retrying it. Once it has, it is surely watching for the re-offer.
		waitOutput(t, sc, "cannot take the hand-off yet", 10*time.Second)
	}
	seen, err := firstseen.Start(handoffDir, sockName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(seen.Close)

	second := startNode(t, bin, e)
	a, err := seen.Wait(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !a.MovedIn || a.StatErr != nil || a.UID != contract.SidecarUID || a.GID != contract.SidecarGID {
		t.Fatalf("the re-offered socket appeared (moved in: %v) owned by %d:%d (stat err %v); a sidecar waking on it must find it its own (%d:%d)",
			a.MovedIn, a.UID, a.GID, a.StatErr, contract.SidecarUID, contract.SidecarGID)
	}
	if !sidecarBefore {
		if sc, err = pod.StartSidecar(contract.ModeLegacy, 30, echo(t)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := testenv.WaitReady(req.TargetPath, 20*time.Second); err != nil {
		t.Fatalf("volume not served after the node plugin restart: %v\n%s", err, sc.Output())
	}
	if err := os.WriteFile(filepath.Join(req.TargetPath, "after-restart.txt"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	requireObject(t, bucket, "after-restart.txt", []byte("ok"))
	// The re-offered volume is the restarted plugin's publication, as if published to it: the
	// same target for another volume is refused, not taken for a republish of this one.
	other := proto.Clone(req).(*csi.NodePublishVolumeRequest)
	other.VolumeId += "-other"
	if _, err := second.csi.NodePublishVolume(ctx(t), other); status.Code(err) != codes.AlreadyExists {
		t.Errorf("another volume on the re-offered target: %v, want AlreadyExists", err)
	}
	// And the kubelet's republish of the same volume (every minute with requiresRepublish)
	// is the same publication.
	if _, err := second.csi.NodePublishVolume(ctx(t), req); err != nil {
		t.Errorf("the kubelet's republish of the re-offered volume: %v, want success", err)
	}
	entries, err := os.ReadDir(handoffDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), ".") {
			t.Fatalf("hidden name left in the hand-off directory: %s", en.Name())
		}
	}
	if _, err := second.csi.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: req.TargetPath}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.Root, "plugins", contract.DriverName, "offers")); len(entries) != 0 {
		t.Fatalf("offer records left behind: %v", entries)
	}
}

// waitOutput waits, at most d, until the sidecar has printed want.
func waitOutput(t *testing.T, sc *testenv.Sidecar, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(sc.Output(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar did not print %q within %s:\n%s", want, d, sc.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The node plugin killed just after the sidecar took the descriptor but before it removed
// the offer's record (the record's removal runs when the hand-off completes): the restarted
// plugin finds the mount alive, leaves it to the sidecar serving it, and removes the stale
// record, so no later restart probes it again and nothing is left behind.
func TestNodePluginRestartAfterTheHandOff(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "gcsfuse-csi-node")
	if err := testenv.GoBuild(bin, "./cmd/gcsfuse-csi-node"); err != nil {
		t.Fatalf("build node plugin: %v", err)
	}
	const bucket = "bkt-restart-taken"
	e, pod, req, first := publishThroughNode(t, bin, bucket)
	offers := filepath.Join(e.Root, "plugins", contract.DriverName, "offers")
	records, err := os.ReadDir(offers)
	if err != nil || len(records) != 1 {
		t.Fatalf("offer records after the publish: %v, %v; want one", records, err)
	}
	record := filepath.Join(offers, records[0].Name())
	saved, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := pod.StartSidecar(contract.ModeLegacy, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitReady(req.TargetPath, 20*time.Second); err != nil {
		t.Fatalf("volume not served: %v\n%s", err, sc.Output())
	}
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.cmd.Wait()
	// As if killed before the taken offer's record was removed.
	if err := os.WriteFile(record, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	second := startNode(t, bin, e)
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(record); err == nil && time.Now().Before(deadline); _, err = os.Stat(record) {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(record); err == nil {
		t.Fatal("the restarted node plugin left the record of an offer the sidecar had taken")
	}
	if err := os.WriteFile(filepath.Join(req.TargetPath, "after-restart.txt"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("the sidecar's mount after the restart: %v\n%s", err, sc.Output())
	}
	requireObject(t, bucket, "after-restart.txt", []byte("ok"))
	if _, err := second.csi.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: req.TargetPath}); err != nil {
		t.Fatal(err)
	}
}
