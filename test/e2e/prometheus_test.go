package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

const (
	// promPort is where the test's Prometheus listens, on the node's address.
	promPort = 19090
	// promScrapeEvery replaces the documented job's 30 s, so the test waits seconds, not
	// minutes, for series and rates.
	promScrapeEvery = "1s"
	// promStartTimeout bounds Prometheus' start (ready endpoint) and its first scrape of the
	// node plugin.
	promStartTimeout = 60 * time.Second
	// dashboardTimeout bounds the wait for every dashboard query to return data.
	dashboardTimeout = 3 * time.Minute
	// promQueryTimeout bounds one query.
	promQueryTimeout = 10 * time.Second
)

var (
	scrapeConfigFile = filepath.Join("..", "..", "deploy", "monitoring", "prometheus-scrape.yaml")
	dashboardFile    = filepath.Join("..", "..", "deploy", "monitoring", "grafana-dashboard.json")
)

// startPrometheus runs a real Prometheus (E2E_PROMETHEUS, Debian's package) in the cluster's
// network namespace (E2E_NETNS), where the pod network is, with the scrape job of
// deploy/monitoring/prometheus-scrape.yaml: its relabelling and honor_labels as documented,
// a 1 s interval, and its targets from a file. Debian builds Prometheus without the
// Kubernetes service discovery, so the test writes the node plugin pod's targets with the
// labels that discovery gives a pod's container ports (__meta_kubernetes_*), and the
// documented relabelling picks the metrics port from them. Prometheus listens on the node's
// address, which this host reaches over the veth hack/cluster-up.sh made.
func startPrometheus(t *testing.T) promv1.API {
	t.Helper()
	bin, netns := os.Getenv("E2E_PROMETHEUS"), os.Getenv("E2E_NETNS")
	if bin == "" || netns == "" {
		if os.Getenv("E2E_REQUIRE") == "1" {
			t.Fatal("E2E_PROMETHEUS and E2E_NETNS must be set (hack/e2e.sh sets them): the dashboard must be evaluated by a real Prometheus")
		}
		t.Skip("E2E_PROMETHEUS / E2E_NETNS not set")
	}
	u, err := url.Parse(gcsURL)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(u.Hostname(), strconv.Itoa(promPort))
	dir := t.TempDir()
	targets := filepath.Join(dir, "targets.json")
	writeTargets(t, targets)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), promConfig(t, targets), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net="+netns, "--", bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // owned by the test: ends when the cleanup kills it
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("prometheus log (last lines):\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	client, err := promapi.NewClient(promapi.Config{Address: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	api := promv1.NewAPI(client)
	deadline := time.Now().Add(promStartTimeout)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus exited: %v", err)
		default:
		}
		v, err := query(api, `up{job="gcsfuse-csi-node", container="gcsfuse-csi-node"}`)
		if err == nil && len(v) == 1 && v[0].Value == 1 {
			t.Logf("prometheus %s scrapes the node plugin %s", addr, v[0].Metric)
			return api
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not scrape the node plugin within %s: up = %v, err %v", promStartTimeout, v, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// writeTargets writes, for file_sd, one target per container port of the node plugin's
// pod with the labels Kubernetes' pod discovery gives it.
func writeTargets(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods("gcsfuse-csi").List(ctx, metav1.ListOptions{LabelSelector: "app=gcsfuse-csi-node"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("node plugin pods: %v %v", pods, err)
	}
	p := pods.Items[0]
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	var groups []group
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			groups = append(groups, group{
				Targets: []string{net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))},
				Labels: map[string]string{
					"__meta_kubernetes_namespace":                 p.Namespace,
					"__meta_kubernetes_pod_name":                  p.Name,
					"__meta_kubernetes_pod_node_name":             p.Spec.NodeName,
					"__meta_kubernetes_pod_container_name":        c.Name,
					"__meta_kubernetes_pod_container_port_name":   port.Name,
					"__meta_kubernetes_pod_container_port_number": strconv.Itoa(int(port.ContainerPort)),
					"__meta_kubernetes_pod_label_app":             p.Labels["app"],
				},
			})
		}
	}
	b, err := json.Marshal(groups)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// promConfig is the documented scrape config with the test's changes: the interval, and
// file_sd (targets) in place of the Kubernetes discovery Debian's build lacks.
func promConfig(t *testing.T, targets string) []byte {
	t.Helper()
	raw, err := os.ReadFile(scrapeConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", scrapeConfigFile, err)
	}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) != 1 {
		t.Fatalf("%s: %d scrape jobs, want 1", scrapeConfigFile, len(jobs))
	}
	job := jobs[0].(map[string]any)
	if _, ok := job["kubernetes_sd_configs"]; !ok {
		t.Fatalf("%s: no kubernetes_sd_configs", scrapeConfigFile)
	}
	delete(job, "kubernetes_sd_configs")
	job["file_sd_configs"] = []any{map[string]any{"files": []string{targets}}}
	job["scrape_interval"] = promScrapeEvery
	cfg["global"] = map[string]any{"scrape_interval": promScrapeEvery, "evaluation_interval": promScrapeEvery}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func query(api promv1.API, q string) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(context.Background(), promQueryTimeout)
	defer cancel()
	v, _, _, err := api.Query(ctx, q, time.Now())
	if err != nil {
		return nil, err
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: a %s, want a vector", q, v.Type())
	}
	return vec, nil
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
	api := startPrometheus(t)
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
			v, err := query(api, q.expr)
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
		v, err := query(api, q)
		if err != nil || len(v) != 1 || v[0].Value <= 0 {
			t.Errorf("%s: %s = %v (%v), want > 0", what, q, v, err)
		}
	}
}
