package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// startedWait bounds the wait for the node plugin to hear that gcsfuse serves.
const startedWait = 20 * time.Second

// fuseFDs returns the descriptors of process pid ("self" for this one) open on /dev/fuse.
func fuseFDs(t *testing.T, pid string) map[int]bool {
	t.Helper()
	dir := filepath.Join("/proc", pid, "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fds := map[int]bool{}
	for _, e := range entries {
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && link == "/dev/fuse" {
			n, _ := strconv.Atoi(e.Name())
			fds[n] = true
		}
	}
	return fds
}

// TestNodePluginHoldsNoFuseDescriptorAfterHandOff guards the rule that once the sidecar has
// taken a volume's FUSE descriptor, the node plugin (this process: testenv runs it in the
// test binary) holds no descriptor of /dev/fuse for it; gcsfuse, in the sidecar, holds the
// only one. A copy kept by the node plugin would keep the connection alive after gcsfuse
// died, and the pod's mount would hang instead of failing. The order is the node plugin's
// own: it closes its copy, then relays the sidecar's statuses, so once it has reported
// GcsfuseStarted its copy must be gone.
func TestNodePluginHoldsNoFuseDescriptorAfterHandOff(t *testing.T) {
	emu.CreateBucketWithOpts(fakestorageBucket("bkt-fd"))
	ev := &events{}
	e, err := testenv.New(testenv.Options{Emulator: emu, SidecarBin: sidecarBin, Log: testLogger(t), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}

	before := fuseFDs(t, "self")
	if err := pod.Publish(ctx(t), "data", "bkt-fd", "", false); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	var offered []int // the node plugin's descriptor of the volume, until the sidecar takes it
	for fd := range fuseFDs(t, "self") {
		if !before[fd] {
			offered = append(offered, fd)
		}
	}
	if len(offered) != 1 {
		t.Fatalf("after NodePublishVolume the node plugin holds %d new /dev/fuse descriptors %v, want 1 (the offered one): the test cannot see it", len(offered), offered)
	}

	sc, err := pod.StartSidecar(contract.ModeLegacy, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	ev.wait(t, contract.EventGcsfuseStarted, startedWait)
	if now := fuseFDs(t, "self"); now[offered[0]] {
		t.Fatalf("the node plugin still holds /dev/fuse descriptor %d after the sidecar took it and gcsfuse serves (its /dev/fuse descriptors: %v)\nsidecar output:\n%s",
			offered[0], now, sc.Output())
	}
	pids := pod.GcsfusePIDs()
	if len(pids) != 1 {
		t.Fatalf("want one gcsfuse for the pod, got %v", pids)
	}
	if held := fuseFDs(t, strconv.Itoa(pids[0])); len(held) != 1 {
		t.Fatalf("gcsfuse holds /dev/fuse descriptors %v, want exactly one (the volume's)", held)
	}
}
