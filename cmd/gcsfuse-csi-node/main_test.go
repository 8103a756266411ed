package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
)

// childEnv makes the test binary run the node plugin's run() instead of the tests, so a test
// can start the real main wiring as a process.
const childEnv = "GCSFUSE_CSI_NODE_TEST_MAIN"

// waitBound bounds every wait of these tests; generous for -race on shared cores.
const waitBound = 20 * time.Second

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run())
	}
	os.Exit(m.Run())
}

// freeAddr returns a local TCP address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// child is the node plugin running as a process.
type child struct {
	cmd     *exec.Cmd
	out     *syncbuf.Buffer
	done    chan struct{} // closed when the process has exited; err is then set
	waitErr error
}

// requireAlive fails the test if the node plugin has exited.
func (c *child) requireAlive(t *testing.T, when string) {
	t.Helper()
	select {
	case <-c.done:
		t.Fatalf("node plugin exited (%v) %s; output:\n%s", c.waitErr, when, c.out.String())
	default:
	}
}

// waitFor polls cond while the node plugin runs, failing the test if it exits first or cond
// does not hold within waitBound.
func (c *child) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(waitBound)
	for !cond() {
		c.requireAlive(t, "while waiting for "+what)
		if time.Now().After(end) {
			t.Fatalf("%s did not happen within %s; node plugin output:\n%s", what, waitBound, c.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metrics(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metricValue returns the value of the sample named series in a Prometheus text exposition,
// -1 if absent.
func metricValue(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// The API server is unreachable (it refuses connections) when the node plugin starts and
// stays so past the pod sync timeout: the node plugin must keep serving CSI calls (it used to
// exit, taking NodePublishVolume down for the whole node), report the outage in its
// metrics, and stop cleanly on SIGTERM.
func TestNodePluginServesCSIWhileTheAPIServerIsUnreachable(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: down, cluster: {server: "http://%s"}}]
users: [{name: nobody, user: {}}]
contexts: [{name: down, context: {cluster: down, user: nobody}}]
current-context: down
`, freeAddr(t))
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "csi.sock")
	metricsAddr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "--endpoint=unix://"+sock, "--node-id=test-node",
		"--kubelet-root="+dir, "--state-dir=-", "--kubeconfig="+kubeconfig,
		"--pod-sync-timeout=200ms", "--metrics-addr="+metricsAddr)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	c := &child{cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.out, c.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // owned by the test: ends when the child does
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})

	c.waitFor(t, "the CSI socket", func() bool { _, err := os.Stat(sock); return err == nil })
	c.waitFor(t, "the sync timeout warning", func() bool { return strings.Contains(c.out.String(), "pod cache not synced") })
	// The reflector retries with a backoff of about a second: a second failed list shows
	// that the watch goes on past the sync timeout.
	c.waitFor(t, "a second failed pod list", func() bool {
		return metricValue(metrics(metricsAddr), metricscatalog.WatchErrors.Name+`{op="list"}`) >= 2
	})
	c.requireAlive(t, "while the API server was unreachable")
	if m := metrics(metricsAddr); metricValue(m, metricscatalog.WatchSynced.Name) != 0 {
		t.Errorf("metrics do not show the pod watch out of sync:\n%s", m)
	}

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if _, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{}); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	info, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "test-node" {
		t.Fatalf("NodeGetInfo = %v, %v", info, err)
	}
	c.requireAlive(t, "after serving CSI calls")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
		if c.waitErr != nil {
			t.Fatalf("node plugin exit after SIGTERM: %v; output:\n%s", c.waitErr, c.out.String())
		}
	case <-time.After(waitBound):
		t.Fatalf("node plugin did not stop within %s of SIGTERM; output:\n%s", waitBound, c.out.String())
	}
}
