package e2e

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/metricstest"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
)

const (
	// metricsPort is the node plugin's metrics port in deploy/base.
	metricsPort = "9920"
	// scrapeEvery is how often TestMetrics scrapes the node plugin while the Job runs.
	scrapeEvery = 250 * time.Millisecond
)

// scrapeNodePlugin reads the node plugin's metrics through the API server's pod proxy, so
// the request stays inside the cluster's network namespace.
func scrapeNodePlugin(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	np := nodePluginPod(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := cs.CoreV1().Pods(np.Namespace).ProxyGet("http", np.Name, metricsPort, "/metrics", nil).DoRaw(ctx)
	if err != nil {
		t.Fatalf("scrape the node plugin: %v", err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("node plugin metrics do not parse: %v", err)
	}
	return mfs
}

// sample sums the series of a family whose labels include want: counters and gauges by value,
// histograms by sample count.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (sum float64, series int) {
	return metricstest.Sum(mfs[name], want)
}

// TestMetrics: a Job writes a known number of bytes through its volume and reads them back.
// While it runs, the node plugin serves that volume's gcsfuse series labelled with the Job
// pod's namespace, name, volume and bucket, and the bytes gcsfuse read from the bucket match
// exactly; after it, the pod's series are gone (its sidecar ended), the node plugin has one
// more trigger -> sidecar exit sample and one more volume-ready sample, and the pod has its
// GcsfuseStarted (with the latency) and SidecarExitRequested Events.
func TestMetrics(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		const size = 3*mib + 12345
		bucket := newBucket(t)
		name := podName(t, "")
		before := scrapeNodePlugin(t)
		exitsBefore, _ := sample(before, metricscatalog.ExitLatency.Name, map[string]string{"mode": mode})
		readyBefore, _ := sample(before, metricscatalog.VolumeReady.Name, nil)
		tr := track(t, metav1.ListOptions{LabelSelector: "job-name=" + name})
		createJob(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever,
			volumes: []volume{{"bucket", bucket, mountPath}},
			// -then keeps the pod running a while after the read-back, for the scrapes.
			args: []string{"write", "-dir", mountPath, "-name", "known.bin", "-bytes", strconv.Itoa(size), "-read-back", "-then", "4s"},
		})

		// During: scrape until the read-back shows (bounded by the Job's own end).
		deadline := time.Now().Add(90 * time.Second)
		var pod string
		var readBytes, writes, uploads float64
		for time.Now().Before(deadline) && readBytes < size {
			if names := tr.podNames(); len(names) == 1 {
				pod = names[0]
				mfs := scrapeNodePlugin(t)
				vol := map[string]string{"namespace": ns, "pod": pod, "volume": "bucket", "bucket": bucket}
				readBytes, _ = sample(mfs, gcsfusemetrics.Prefix+"gcs_read_bytes_count", vol)
				writes, _ = sample(mfs, gcsfusemetrics.Prefix+"fs_ops_count", map[string]string{"pod": pod, "volume": "bucket", "fs_op": "WriteFile"})
				uploads, _ = sample(mfs, gcsfusemetrics.Prefix+"gcs_request_count", map[string]string{"pod": pod, "volume": "bucket", "gcs_method": "FinalizeUpload"})
			}
			time.Sleep(scrapeEvery)
		}
		if readBytes != size || writes < 1 || uploads < 1 {
			t.Fatalf("pod %s volume bucket: gcs_read_bytes_count %v (want %d), WriteFile ops %v, FinalizeUpload %v\n%s",
				pod, readBytes, size, writes, uploads, logs(pod, contract.SidecarContainerName))
		}
		t.Logf("during the Job: gcsfuse read %v bytes back, %v WriteFile ops, %v uploads finalized", readBytes, writes, uploads)

		cond, _ := waitJob(t, name, 120*time.Second)
		waitPod(t, pod, 30*time.Second, "terminal", terminal)
		expectObject(t, bucket, "known.bin", size)
		if cond != "Complete" {
			t.Fatalf("job %s", cond)
		}

		// After: the exit latency sample exists, the pod's gcsfuse series are gone.
		var after map[string]*dto.MetricFamily
		var exits float64
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(scrapeEvery) {
			after = scrapeNodePlugin(t)
			if exits, _ = sample(after, metricscatalog.ExitLatency.Name, map[string]string{"mode": mode}); exits > exitsBefore {
				break
			}
		}
		if exits <= exitsBefore {
			t.Errorf("%s{mode=%q}: %v samples before the Job, %v after", metricscatalog.ExitLatency.Name, mode, exitsBefore, exits)
		}
		if ready, _ := sample(after, metricscatalog.VolumeReady.Name, nil); ready <= readyBefore {
			t.Errorf("%s: %v samples before the Job, %v after", metricscatalog.VolumeReady.Name, readyBefore, ready)
		}
		if _, n := sample(after, gcsfusemetrics.Prefix+"fs_ops_count", map[string]string{"pod": pod}); n != 0 {
			t.Errorf("%d gcsfuse series of pod %s after its sidecar ended", n, pod)
		}
		if tracked, n := sample(after, metricscatalog.PodsTracked.Name, nil); n != 1 || tracked < 1 {
			t.Errorf("%s = %v (%d series)", metricscatalog.PodsTracked.Name, tracked, n)
		}
		waitEvent(t, pod, 10*time.Second, regexp.MustCompile("^"+contract.EventGcsfuseStarted+"$"), "volume bucket", "serving after")
		waitEvent(t, pod, 10*time.Second, regexp.MustCompile("^"+contract.EventSidecarExitRequested+"$"))
	})
}
