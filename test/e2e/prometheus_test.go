package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/promrun"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

const (
	// promPort is where the test's Prometheus listens, on the node's address.
	promPort = 19090
	// promStartTimeout bounds Prometheus' start and its first scrape of the node plugin.
	promStartTimeout = 60 * time.Second
	// dashboardTimeout bounds the wait for every dashboard query to return data.
	dashboardTimeout = 3 * time.Minute
)

var (
	scrapeConfigFile = filepath.Join("..", "..", "deploy", "monitoring", "prometheus-scrape.yaml")
	dashboardFile    = filepath.Join("..", "..", "deploy", "monitoring", "grafana-dashboard.json")
)

// startPrometheus runs a real Prometheus (E2E_PROMETHEUS, Debian's package) in the cluster's
// network namespace (E2E_NETNS) with the documented scrape job (internal/testing/promrun says how),
// and waits until it scrapes the node plugin.
func startPrometheus(t *testing.T) *promrun.Server {
	t.Helper()
	bin, netns := suite.Prometheus, suite.NetNS
	if bin == "" || netns == "" {
		if suite.Require {
			t.Fatal("E2E_PROMETHEUS and E2E_NETNS must be set (hack/e2e.sh sets them): the dashboard must be evaluated by a real Prometheus")
		}
		t.Skip("E2E_PROMETHEUS / E2E_NETNS not set")
	}
	u, err := url.Parse(gcsURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), promStartTimeout)
	defer cancel()
	np := nodePluginPod(t)
	prom, err := promrun.Run(ctx, promrun.Config{Binary: bin, NetNS: netns, Listen: net.JoinHostPort(u.Hostname(), strconv.Itoa(promPort)),
		ScrapeConfig: scrapeConfigFile, NodePlugin: &np, Dir: t.TempDir()}, promStartTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if logTail := prom.Stop(); t.Failed() {
			t.Logf("prometheus log (last lines):\n%s", logTail)
		}
	})
	return prom
}

// panelQuery is one query of the Grafana dashboard.
type panelQuery struct{ panel, expr string }

// dashboardQueries reads every target of every panel of the dashboard, and its namespace
// variable's label_values query as the PromQL it stands for, with $namespace set to
// namespace.
func dashboardQueries(t *testing.T, namespace string) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var qs []panelQuery
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		s, _ := v.Query.(string)
		if m := labelValues.FindStringSubmatch(s); m != nil {
			qs = append(qs, panelQuery{"variable " + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], m[1])})
		}
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				qs = append(qs, panelQuery{p.Title, strings.ReplaceAll(tg.Expr, "$namespace", regexp.QuoteMeta(namespace))})
			}
		}
	}
	if len(qs) < 10 {
		t.Fatalf("%s: only %d queries found", dashboardFile, len(qs))
	}
	return qs
}

// TestPrometheusDashboard: a real Prometheus scrapes the node plugin with the documented
// scrape job, and every query of the Grafana dashboard (and its namespace variable) returns
// data while a pod reads and writes its bucket. What the panels need happens first: a Job
// ends (exit reasons, exit latency), a pod is deleted while running (drain), a pod that opts
// out of the sidecar has its mount refused (failed CSI calls), the bucket answers 503 a few
// times (gcsfuse retries), and the running pod reads a cached file (file cache) and a
// missing one (file system errors). Each per-pod panel must show the running pod.
func TestPrometheusDashboard(t *testing.T) {
	prom := startPrometheus(t)
	bucket := newBucket(t)
	const seedSize = 256 * 1024
	upload(t, bucket, "seed.bin", seedSize)
	vols := []volume{{"bucket", bucket, mountPath}}

	// The running pod: writes a small file every 500 ms and reads seed.bin after each (from
	// the file cache after the first), while a second container looks up a missing file.
	reader := podName(t, "reader")
	createPod(t, reader, podOpts{
		restart: corev1.RestartPolicyNever, volumes: vols,
		attrs: map[string]string{contract.AttrFileCacheCapacity: "64Mi"},
		args: []string{"loop", "-dir", mountPath, "-prefix", "part", "-bytes", "4096", "-every", "500ms",
			"-read", "seed.bin", "-read-bytes", strconv.Itoa(seedSize)},
		extra: []corev1.Container{workloadContainer("missing", vols, "read", "-dir", mountPath, "-name", "missing.bin")},
	})
	waitPod(t, reader, 120*time.Second, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	// A Job that ends, a pod deleted while it runs, a pod whose mount is refused.
	job := podName(t, "job")
	createJob(t, job, podOpts{restart: corev1.RestartPolicyNever, volumes: vols,
		args: []string{"write", "-dir", mountPath, "-name", "job.bin", "-bytes", "65536"}})
	deleted := podName(t, "deleted")
	createPod(t, deleted, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, args: []string{"sleep", "-for", "10m"}})
	waitPod(t, deleted, 120*time.Second, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	deletePod(t, deleted, nil, 60*time.Second)
	optedOut := podName(t, "optout")
	p := podObject(optedOut, podOpts{restart: corev1.RestartPolicyNever, volumes: vols, args: []string{"sleep", "-for", "1s"}})
	p.Annotations = map[string]string{contract.AnnotationInject: "false"}
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", optedOut, err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Pods(ns).Delete(context.Background(), optedOut, metav1.DeleteOptions{}) })
	waitEvent(t, optedOut, 60*time.Second, regexp.MustCompile(`^FailedMount$`), "no gcsfuse-sidecar")
	admin(t, http.MethodPut, "faults/"+bucket, map[string]int{"status": http.StatusServiceUnavailable, "count": 3})

	// Every query, until each returns data (bounded).
	qs := dashboardQueries(t, ns)
	perPod := regexp.MustCompile(`by \([^)]*\bpod\b[^)]*\)|topk`)
	deadline := time.Now().Add(dashboardTimeout)
	var missing []string
	for {
		missing = missing[:0]
		for _, q := range qs {
			v, err := prom.Query(context.Background(), q.expr)
			switch {
			case err != nil:
				missing = append(missing, fmt.Sprintf("%s: %s: %v", q.panel, q.expr, err))
			case len(v) == 0:
				missing = append(missing, fmt.Sprintf("%s: %s: no data", q.panel, q.expr))
			case strings.Contains(q.expr, regexp.QuoteMeta(ns)) && perPod.MatchString(q.expr) && !slices.ContainsFunc(v, func(s *model.Sample) bool {
				return string(s.Metric["pod"]) == reader
			}):
				missing = append(missing, fmt.Sprintf("%s: %s: no series of pod %s in %v", q.panel, q.expr, reader, v))
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %d of %d dashboard queries still fail:\n  %s", dashboardTimeout, len(missing), len(qs), strings.Join(missing, "\n  "))
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("all %d dashboard queries return data", len(qs))
	// The figures behind two panels, as a user would read them.
	for q, what := range map[string]string{
		fmt.Sprintf(`sum(gcsfuse_gcs_read_bytes_count{namespace=%q, pod=%q})`, ns, reader):                    "bytes read from the bucket",
		fmt.Sprintf(`sum(gcsfuse_file_cache_read_count{namespace=%q, pod=%q, cache_hit="true"})`, ns, reader): "file cache hits",
		fmt.Sprintf(`sum(gcsfuse_gcs_retry_count{namespace=%q, pod=%q})`, ns, reader):                         "retried GCS requests",
	} {
		v, err := prom.Query(context.Background(), q)
		if err != nil || len(v) != 1 || v[0].Value <= 0 {
			t.Errorf("%s: %s = %v (%v), want > 0", what, q, v, err)
		}
	}
}
