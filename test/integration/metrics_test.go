package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/metricstest"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podmetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// value returns the sum of the series of family name whose labels include want.
func value(mfs []*dto.MetricFamily, name string, want map[string]string) (float64, int) {
	for _, mf := range mfs {
		if mf.GetName() == name {
			return metricstest.Sum(mf, want)
		}
	}
	return 0, 0
}

// gcsfuse's own metrics travel from each gcsfuse (its --prometheus-port on the loopback),
// through the sidecar's unix socket in the pod's gcsfuse-tmp emptyDir, to the node plugin's
// collector, labelled with the pod and the volume; they match what the pod did; and they are
// gone once the sidecar is.
func TestGcsfuseMetricsReachTheNodePlugin(t *testing.T) {
	const bucket = "bkt-metrics"
	emu.CreateBucketWithOpts(fakestorageBucket(bucket))
	reg := prometheus.NewRegistry()
	nodeMetrics, err := csidriver.NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := testenv.New(testenv.Options{Emulator: emu, SidecarBin: sidecarBin, Log: testLogger(t), NodeMetrics: nodeMetrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	pod, sc, target := mounted(t, e, contract.ModeLegacy, bucket)

	const size = 123457
	data := randomBytes(t, size)
	if err := os.WriteFile(filepath.Join(target, "known.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The written pages are in the page cache: drop them, so the read goes to gcsfuse.
	dropPageCache(t, filepath.Join(target, "known.bin"))
	got, err := os.ReadFile(filepath.Join(target, "known.bin"))
	if err != nil || len(got) != size {
		t.Fatalf("read back %d bytes: %v", len(got), err)
	}
	requireObject(t, bucket, "known.bin", data)

	pods := []podmetrics.Pod{{UID: pod.UID, Namespace: "team-a", Name: "writer", Volumes: []string{"data"}}}
	c, err := podmetrics.New(podmetrics.Config{KubeletRoot: e.Root, Pods: func() []podmetrics.Pod { return pods }}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	vol := map[string]string{"namespace": "team-a", "pod": "writer", "volume": "data", "bucket": bucket}
	mfs, _ := c.Gather()
	if v, n := value(mfs, gcsfusemetrics.Prefix+"gcs_read_bytes_count", vol); n != 1 || v != size {
		t.Errorf("gcs_read_bytes_count for the volume = %v in %d series, want %d in 1", v, n, size)
	}
	writes := map[string]string{"volume": "data", "fs_op": "WriteFile"}
	if v, _ := value(mfs, gcsfusemetrics.Prefix+"fs_ops_count", writes); v < 1 {
		t.Errorf("no WriteFile ops counted")
	}
	uploads := map[string]string{"volume": "data", "gcs_method": "FinalizeUpload"}
	if v, _ := value(mfs, gcsfusemetrics.Prefix+"gcs_request_count", uploads); v < 1 {
		t.Errorf("no finalized upload counted")
	}
	if v, _ := value(mfs, gcsfusemetrics.Prefix+"process_resident_memory_bytes", vol); v < 1<<20 {
		t.Errorf("gcsfuse RSS %v bytes", v)
	}
	if n := testutil.CollectAndCount(reg, metricscatalog.VolumeReady.Name); n != 1 {
		t.Errorf("%s: %d series", metricscatalog.VolumeReady.Name, n)
	}
	if h := readyCount(t, reg); h != 1 {
		t.Errorf("%s observed %d volumes ready, want 1", metricscatalog.VolumeReady.Name, h)
	}

	if err := podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "test"}); err != nil {
		t.Fatal(err)
	}
	if code, err := sc.Wait(10 * time.Second); err != nil || code != 0 {
		t.Fatalf("sidecar exit %d, %v", code, err)
	}
	if _, err := os.Lstat(podfiles.At(pod.TmpDir).MetricsSocket()); !os.IsNotExist(err) {
		t.Errorf("metrics socket left behind by the sidecar: %v", err)
	}
	mfs, _ = c.Gather()
	if _, n := value(mfs, gcsfusemetrics.Prefix+"fs_ops_count", vol); n != 0 {
		t.Errorf("%d series after the sidecar ended", n)
	}
}

func dropPageCache(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

func readyCount(t *testing.T, reg *prometheus.Registry) uint64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metricscatalog.VolumeReady.Name {
			return mf.Metric[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// The incumbent's disableMetrics: "true" (an alias of prometheus-port=0): the volume serves
// as usual, its gcsfuse has no metrics port (no listener, a single --prometheus-port=0 on
// its command line), and the node plugin exports no series for it.
func TestDisableMetricsVolumeServesWithoutMetrics(t *testing.T) {
	const bucket = "bkt-no-metrics"
	emu.CreateBucketWithOpts(fakestorageBucket(bucket))
	e, err := testenv.New(testenv.Options{Emulator: emu, SidecarBin: sidecarBin, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	pod, sc, target := mountedWith(t, e, contract.ModeLegacy, bucket, func(req *csi.NodePublishVolumeRequest) {
		req.VolumeContext["disableMetrics"] = "true"
	})
	data := randomBytes(t, 4096)
	if err := os.WriteFile(filepath.Join(target, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	requireObject(t, bucket, "f.bin", data)

	args := gcsfuseArgsServing(t, target)
	var ports []string
	for _, a := range args {
		if strings.HasPrefix(a, "--prometheus-port") {
			ports = append(ports, a)
		}
	}
	if len(ports) != 1 || ports[0] != "--prometheus-port=0" {
		t.Fatalf("gcsfuse metrics flags %q, want only --prometheus-port=0 (args %q)", ports, args)
	}
	pods := []podmetrics.Pod{{UID: pod.UID, Namespace: "team-a", Name: "quiet", Volumes: []string{"data"}}}
	c, err := podmetrics.New(podmetrics.Config{KubeletRoot: e.Root, Pods: func() []podmetrics.Pod { return pods }}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mfs, _ := c.Gather()
	if _, n := value(mfs, gcsfusemetrics.Prefix+"fs_ops_count", map[string]string{"volume": "data"}); n != 0 {
		t.Errorf("%d gcsfuse series for a volume with disableMetrics", n)
	}
	if err := podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "test"}); err != nil {
		t.Fatal(err)
	}
	if code, err := sc.Wait(10 * time.Second); err != nil || code != 0 {
		t.Fatalf("sidecar exit %d, %v", code, err)
	}
}

// gcsfuseArgsServing is the command line of the gcsfuse process whose mount point is target.
func gcsfuseArgsServing(t *testing.T, target string) []string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.Contains(b, []byte("gcsfuse")) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) == "gcsfuse" && slices.Contains(args, "/dev/fd/3") && slices.Contains(args, "bkt-no-metrics") {
			return args
		}
	}
	t.Fatalf("no gcsfuse process serving %s", target)
	return nil
}
