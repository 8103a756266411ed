package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testenv"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
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
// that starts later must serve it.
func TestNodePluginRestartBeforeSidecarConnects(t *testing.T) {
	e := newEnv(t, "bkt-restart")
	bin := filepath.Join(e.Root, "gcsfuse-csi-node")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/gcsfuse-csi-node").CombinedOutput(); err != nil {
		t.Fatalf("build node plugin: %v\n%s", err, out)
	}
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := pod.PublishRequest("data", "bkt-restart", "", false)
	if err := os.MkdirAll(filepath.Dir(req.TargetPath), 0o750); err != nil {
		t.Fatal(err)
	}
	first := startNode(t, bin, e)
	if _, err := first.csi.NodePublishVolume(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	_ = first.cmd.Wait()
	if _, err := os.Stat(req.TargetPath); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after the node plugin died the mount should be dead (ENOTCONN), stat = %v", err)
	}

	second := startNode(t, bin, e)
	sc, err := pod.StartSidecar(contract.ModeLegacy, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitReady(req.TargetPath, 20*time.Second); err != nil {
		t.Fatalf("volume not served after the node plugin restart: %v\n%s", err, sc.Output())
	}
	if err := os.WriteFile(filepath.Join(req.TargetPath, "after-restart.txt"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	requireObject(t, "bkt-restart", "after-restart.txt", []byte("ok"))
	if _, err := second.csi.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: req.VolumeId, TargetPath: req.TargetPath}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(e.Root, "plugins", contract.DriverName, "offers")); len(entries) != 0 {
		t.Fatalf("offer records left behind: %v", entries)
	}
}
