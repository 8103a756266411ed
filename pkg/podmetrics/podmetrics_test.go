package podmetrics

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

func tmpDir(t testing.TB, root, uid string) string {
	d := podfiles.TmpDirPath(root, uid)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// serveSidecar serves body (text format) on a metrics socket at path, as a sidecar would: in
// the format the client asks for.
func serveSidecar(t testing.TB, path, body string) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := gcsfusemetrics.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var mfs []*dto.MetricFamily
	for _, mf := range parsed {
		mfs = append(mfs, mf)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		format := expfmt.NegotiateAccept(r.Header, expfmt.NewFormat(expfmt.TypeProtoDelim), expfmt.NewFormat(expfmt.TypeTextPlain))
		w.Header().Set("Content-Type", string(format))
		_ = gcsfusemetrics.Encode(w, format, mfs)
	})}
	go func() { _ = srv.Serve(ln) }() // ends at cleanup
	t.Cleanup(func() { srv.Close() })
}

const sidecarBody = `# TYPE gcsfuse_gcs_read_bytes_count counter
gcsfuse_gcs_read_bytes_count{volume="data",bucket="b1"} 5000
gcsfuse_gcs_read_bytes_count{volume="not-a-volume-of-the-pod",bucket="b1"} 7
# TYPE gcsfuse_fs_ops_count counter
gcsfuse_fs_ops_count{volume="data",bucket="b1",fs_op="WriteFile"} 6
# TYPE go_goroutines gauge
go_goroutines 12
`

func series(mfs []*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			var parts []string
			for _, lp := range m.Label {
				parts = append(parts, lp.GetName()+"="+lp.GetValue())
			}
			out[strings.Join(parts, ",")] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestCollectorLabelsAndBoundsPodSeries(t *testing.T) {
	root, err := os.MkdirTemp("", "pm") // short: a unix socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	serveSidecar(t, podfiles.At(tmpDir(t, root, "uid-a")).MetricsSocket(), sidecarBody)
	tmpDir(t, root, "uid-nosock") // no sidecar yet: nothing, and no error
	// A pod whose socket is a symlink to a socket elsewhere: never read.
	elsewhere := filepath.Join(root, "host.sock")
	serveSidecar(t, elsewhere, sidecarBody)
	if err := os.Symlink(elsewhere, podfiles.At(tmpDir(t, root, "uid-link")).MetricsSocket()); err != nil {
		t.Fatal(err)
	}
	pods := []Pod{
		{UID: "uid-a", Namespace: "ns", Name: "a", Volumes: []string{"data"}},
		{UID: "uid-nosock", Namespace: "ns", Name: "nosock", Volumes: []string{"data"}},
		{UID: "uid-link", Namespace: "ns", Name: "link", Volumes: []string{"data"}},
	}
	reg := prometheus.NewRegistry()
	c, err := New(Config{KubeletRoot: root, Pods: func() []Pod { return pods }}, reg)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := c.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := series(mfs, gcsfusemetrics.Prefix+"gcs_read_bytes_count")
	want := map[string]float64{"namespace=ns,pod=a,volume=data,bucket=b1": 5000}
	if len(got) != 1 || got["namespace=ns,pod=a,volume=data,bucket=b1"] != 5000 {
		t.Fatalf("read bytes series = %v, want %v", got, want)
	}
	if ops := series(mfs, gcsfusemetrics.Prefix+"fs_ops_count"); ops["namespace=ns,pod=a,volume=data,bucket=b1,fs_op=WriteFile"] != 6 {
		t.Errorf("fs_ops_count = %v", ops)
	}
	for _, mf := range mfs {
		if mf.GetName() == "go_goroutines" {
			t.Error("a sidecar's non-gcsfuse series was re-exported")
		}
	}
	if n := testutil.ToFloat64(c.errors.WithLabelValues("dial")); n != 1 {
		t.Errorf("dial errors = %v, want 1 (the symlinked socket)", n)
	}

	// The pod is gone from the watch: its series are gone from the next scrape.
	pods = pods[1:]
	mfs, _ = c.Gather()
	if got := series(mfs, gcsfusemetrics.Prefix+"gcs_read_bytes_count"); len(got) != 0 {
		t.Errorf("series of a pod that is gone: %v", got)
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{KubeletRoot: "relative", Pods: func() []Pod { return nil }},
		{KubeletRoot: "/var/lib/kubelet"},
		{KubeletRoot: "/var/lib/kubelet", Pods: func() []Pod { return nil }, Workers: -1},
	} {
		if _, err := New(cfg, prometheus.NewRegistry()); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestFromPod(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "gcs", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}},
			{Name: "other-csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "other.example.com"}}},
			{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
			{Name: contract.TmpVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	// Not injected (a shared volume needs no sidecar): its claim may be another driver's.
	if p, ok := FromPod(pod, contract.DriverName); !ok || strings.Join(p.Volumes, ",") != "gcs" {
		t.Fatalf("a pod without the sidecar: FromPod = %+v, %v; want only its inline volume", p, ok)
	}
	pod.Spec.Containers = []corev1.Container{{Name: "app"}, {Name: contract.SidecarContainerName}}
	p, ok := FromPod(pod, contract.DriverName)
	if !ok || p.UID != "u" || strings.Join(p.Volumes, ",") != "gcs,claim" {
		t.Fatalf("FromPod = %+v, %v", p, ok)
	}
	// Installed under the GKE driver's name: that driver's inline volumes are ours.
	if p, _ := FromPod(pod, contract.IncumbentDriverName); strings.Join(p.Volumes, ",") != "claim" {
		t.Errorf("installed as %s: volumes %v, want only the claim", contract.IncumbentDriverName, p.Volumes)
	}
	pod.Spec.Volumes[1].CSI.Driver = contract.IncumbentDriverName
	if p, _ := FromPod(pod, contract.IncumbentDriverName); strings.Join(p.Volumes, ",") != "other-csi,claim" {
		t.Errorf("installed as %s: volumes %v, want other-csi,claim", contract.IncumbentDriverName, p.Volumes)
	}
	pod.Status.Phase = corev1.PodSucceeded
	if _, ok := FromPod(pod, contract.DriverName); ok {
		t.Error("a finished pod is read")
	}
}

// hangingSidecar is a metrics socket at path that accepts and never answers, as any
// container that mounts the pod's gcsfuse-tmp volume can make.
func hangingSidecar(t testing.TB, path string) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() { // ends when the listener closes at cleanup
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
}

// Thirty pods whose metrics sockets accept and never answer cannot hold a scrape: the
// collection ends within its budget, the pods left out are counted in a metric of their
// own, and once each hanging socket has been tried (8 workers, 5 tries each per scrape)
// the healthy pods, read first, are in every scrape.
func TestCollectorHangingSocketsKeepTheScrapeBounded(t *testing.T) {
	root, err := os.MkdirTemp("", "pm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var pods []Pod
	for i := range 30 {
		uid := fmt.Sprintf("hang-%d", i)
		hangingSidecar(t, podfiles.At(tmpDir(t, root, uid)).MetricsSocket())
		pods = append(pods, Pod{UID: uid, Namespace: "ns", Name: uid, Volumes: []string{"data"}})
	}
	for i := range 3 {
		uid := fmt.Sprintf("ok-%d", i)
		serveSidecar(t, podfiles.At(tmpDir(t, root, uid)).MetricsSocket(), sidecarBody)
		pods = append(pods, Pod{UID: uid, Namespace: "ns", Name: uid, Volumes: []string{"data"}})
	}
	reg := prometheus.NewRegistry()
	const budget = time.Second
	c, err := New(Config{KubeletRoot: root, Pods: func() []Pod { return pods }, ScrapeBudget: budget, PodTimeout: budget / 5}, reg)
	if err != nil {
		t.Fatal(err)
	}
	healthy := func(mfs []*dto.MetricFamily) int {
		return len(series(mfs, gcsfusemetrics.Prefix+"gcs_read_bytes_count"))
	}
	// A loaded machine may make a healthy pod miss a scrape too: a few scrapes are allowed
	// for every healthy pod to be in one.
	const scrapes = 6
	served := false
	for scrape := 1; scrape <= scrapes && !served; scrape++ {
		start := time.Now()
		mfs, err := c.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > budget+time.Second {
			t.Fatalf("scrape %d took %s with a %s budget", scrape, took, budget)
		}
		slow := testutil.ToFloat64(c.slow)
		t.Logf("scrape %d: %d healthy pods' series, %v slow pods", scrape, healthy(mfs), slow)
		if scrape == 1 && slow < 30 {
			t.Errorf("scrape 1: %v slow pods counted, want at least the 30 hanging ones", slow)
		}
		served = healthy(mfs) == 3 && slow == 30
	}
	if !served {
		t.Errorf("no scrape of %d had the 3 healthy pods' series and the 30 hanging pods counted slow (the hanging pods read last)", scrapes)
	}
}

// A pod the budget ran out before (one worker, held by a hanging socket for the whole
// budget) is counted slow like the one that hung: the gauge says how many pods' series are
// missing from the scrape, not how many sockets were tried.
func TestCollectorCountsPodsNeverReached(t *testing.T) {
	root, err := os.MkdirTemp("", "pm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	var pods []Pod
	for i := range 5 {
		uid := fmt.Sprintf("hang-%d", i)
		hangingSidecar(t, podfiles.At(tmpDir(t, root, uid)).MetricsSocket())
		pods = append(pods, Pod{UID: uid, Namespace: "ns", Name: uid, Volumes: []string{"data"}})
	}
	const budget = 300 * time.Millisecond
	c, err := New(Config{KubeletRoot: root, Pods: func() []Pod { return pods }, ScrapeBudget: budget, PodTimeout: budget, Workers: 1}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Gather(); err != nil {
		t.Fatal(err)
	}
	if slow := testutil.ToFloat64(c.slow); slow != 5 {
		t.Errorf("%v slow pods, want 5: the first hung for the whole budget, the other four were never reached", slow)
	}
}

// The node's shared mounter is read from its own directory, its volumes being sharing keys.
func TestCollectorReadsTheSharedMounter(t *testing.T) {
	root, err := os.MkdirTemp("", "pm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	mounter := filepath.Join(root, "mounter")
	if err := os.Mkdir(mounter, 0o755); err != nil {
		t.Fatal(err)
	}
	serveSidecar(t, podfiles.At(mounter).MetricsSocket(), `# TYPE gcsfuse_gcs_read_bytes_count counter
gcsfuse_gcs_read_bytes_count{volume="shared-0123",bucket="b1"} 42
gcsfuse_gcs_read_bytes_count{volume="shared-gone",bucket="b1"} 1
`)
	pods := []Pod{{UID: "shared-mounter", Name: "gcsfuse-mounter", Volumes: []string{"shared-0123"}, Dir: mounter}}
	c, err := New(Config{KubeletRoot: root, Pods: func() []Pod { return pods }}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	mfs, _ := c.Gather()
	got := series(mfs, gcsfusemetrics.Prefix+"gcs_read_bytes_count")
	if len(got) != 1 || got["namespace=,pod=gcsfuse-mounter,volume=shared-0123,bucket=b1"] != 42 {
		t.Fatalf("mounter series = %v", got)
	}
}

// A finished pod (Succeeded or Failed: its sidecar is gone) is not read at a scrape.
func TestFromPodSkipsFinishedPods(t *testing.T) {
	for _, phase := range []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
			Spec:   corev1.PodSpec{Volumes: []corev1.Volume{{Name: "gcs", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}}}},
			Status: corev1.PodStatus{Phase: phase}}
		if _, ok := FromPod(pod, contract.DriverName); ok {
			t.Errorf("a %s pod is read", phase)
		}
	}
}
