// Package promrun runs a real Prometheus (Debian's package) against the local cluster's node
// plugin with the scrape job users are told to use (deploy/monitoring/prometheus-scrape.yaml),
// for the e2e test of the Grafana dashboard and for hack/scale's node plugin figures.
//
// Prometheus runs in the cluster's network namespace, where the pod network is, and listens
// on the node's address, which the machine reaches over the veth hack/cluster-up.sh made:
// no traffic leaves the machine. Debian builds Prometheus without the Kubernetes service
// discovery, so the documented job's kubernetes_sd_configs is replaced by a file of the node
// plugin pod's targets carrying the labels that discovery gives a pod's container ports
// (__meta_kubernetes_*); the job's relabelling and honor_labels run as written.
package promrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	// ScrapeInterval replaces the documented job's 30 s, so callers wait seconds, not
	// minutes, for series and rates.
	ScrapeInterval = "1s"
	// queryTimeout bounds one query.
	queryTimeout = 10 * time.Second
	// pollEvery is the pace of WaitFor.
	pollEvery = 500 * time.Millisecond
	// stopTimeout bounds the wait for Prometheus to exit after SIGKILL.
	stopTimeout = 10 * time.Second
	// NodePluginUp is the query that is 1 once Prometheus scrapes the node plugin through the
	// documented job (its relabelling sets container).
	NodePluginUp = `up{job="gcsfuse-csi-node", container="gcsfuse-csi-node"}`
)

// Config says how to run Prometheus. Every field is required.
type Config struct {
	// Binary is the prometheus executable; NetNS the network namespace to run it in (a
	// path such as /run/netns/gcsfuse-csi).
	Binary, NetNS string
	// Listen is host:port, an address of that namespace this machine reaches.
	Listen string
	// ScrapeConfig is the documented scrape job's file.
	ScrapeConfig string
	// NodePlugin is the node plugin's pod (its IP and container ports are the targets).
	NodePlugin *corev1.Pod
	// Dir holds the configuration, the data and the log; the caller removes it.
	Dir string
	// Transport, if set, carries the queries (a caller that guards its dials).
	Transport http.RoundTripper
}

func (c Config) validate() error {
	var missing []string
	for name, v := range map[string]string{"Binary": c.Binary, "NetNS": c.NetNS, "Listen": c.Listen, "ScrapeConfig": c.ScrapeConfig, "Dir": c.Dir} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if c.NodePlugin == nil || c.NodePlugin.Status.PodIP == "" {
		missing = append(missing, "NodePlugin (with its pod IP)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("promrun: missing %s", strings.Join(missing, ", "))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("promrun: Listen %q: %w", c.Listen, err)
	}
	return nil
}

// Server is a running Prometheus. Stop ends it.
type Server struct {
	api    promv1.API
	cmd    *exec.Cmd
	exited chan error
	log    string
}

// Start writes the configuration and the targets, and starts Prometheus. It does not wait
// for the first scrape: WaitFor(NodePluginUp) does.
func Start(c Config) (*Server, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	targets := filepath.Join(c.Dir, "targets.json")
	if err := os.WriteFile(targets, NodePluginTargets(c.NodePlugin), 0o600); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(c.ScrapeConfig)
	if err != nil {
		return nil, err
	}
	cfg, err := Configure(raw, targets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.ScrapeConfig, err)
	}
	cfgPath := filepath.Join(c.Dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, err
	}
	s := &Server{log: filepath.Join(c.Dir, "prometheus.log"), exited: make(chan error, 1)}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	s.cmd = exec.Command("nsenter", "--net="+c.NetNS, "--", c.Binary,
		"--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(c.Dir, "data"),
		"--web.listen-address="+c.Listen, "--log.level=warn")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start prometheus: %w", err)
	}
	go func() { s.exited <- s.cmd.Wait() }() // owned by s: ends when the process does (Stop kills it)
	client, err := promapi.NewClient(promapi.Config{Address: "http://" + c.Listen, RoundTripper: c.Transport})
	if err != nil {
		s.Stop()
		return nil, err
	}
	s.api = promv1.NewAPI(client)
	return s, nil
}

// Run is Start, then WaitFor(NodePluginUp) within up; on failure Prometheus is stopped and
// the error carries the end of its log.
func Run(ctx context.Context, c Config, up time.Duration) (*Server, error) {
	s, err := Start(c)
	if err != nil {
		return nil, err
	}
	if err := s.WaitFor(ctx, NodePluginUp, up); err != nil {
		return nil, fmt.Errorf("prometheus does not scrape the node plugin: %w\n%s", err, s.Stop())
	}
	return s, nil
}

// Configure turns the documented scrape config raw into the one to run: the interval, and a
// file of targets in place of the Kubernetes discovery. It fails on a config that is not
// one job with kubernetes_sd_configs, so the documented file cannot drift from what runs.
func Configure(raw []byte, targets string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	jobs, _ := cfg["scrape_configs"].([]any)
	if len(jobs) != 1 {
		return nil, fmt.Errorf("%d scrape jobs, want 1", len(jobs))
	}
	job, ok := jobs[0].(map[string]any)
	if !ok {
		return nil, errors.New("the scrape job is not a map")
	}
	if _, ok := job["kubernetes_sd_configs"]; !ok {
		return nil, errors.New("no kubernetes_sd_configs")
	}
	delete(job, "kubernetes_sd_configs")
	job["file_sd_configs"] = []any{map[string]any{"files": []string{targets}}}
	job["scrape_interval"] = ScrapeInterval
	cfg["global"] = map[string]any{"scrape_interval": ScrapeInterval, "evaluation_interval": ScrapeInterval}
	return yaml.Marshal(cfg)
}

// NodePluginTargets is the file_sd content for pod: one target per container port, with the
// labels Kubernetes' pod discovery gives it.
func NodePluginTargets(pod *corev1.Pod) []byte {
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	groups := []group{}
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			n := strconv.Itoa(int(port.ContainerPort))
			groups = append(groups, group{
				Targets: []string{net.JoinHostPort(pod.Status.PodIP, n)},
				Labels: map[string]string{
					"__meta_kubernetes_namespace":                 pod.Namespace,
					"__meta_kubernetes_pod_name":                  pod.Name,
					"__meta_kubernetes_pod_node_name":             pod.Spec.NodeName,
					"__meta_kubernetes_pod_container_name":        c.Name,
					"__meta_kubernetes_pod_container_port_name":   port.Name,
					"__meta_kubernetes_pod_container_port_number": n,
					"__meta_kubernetes_pod_label_app":             pod.Labels["app"],
				},
			})
		}
	}
	b, _ := json.Marshal(groups) // strings only: cannot fail
	return b
}

// Query evaluates q at now; a result that is not an instant vector is an error.
func (s *Server) Query(ctx context.Context, q string) (model.Vector, error) {
	return s.QueryAt(ctx, q, time.Now())
}

// QueryAt evaluates q at t.
func (s *Server) QueryAt(ctx context.Context, q string, t time.Time) (model.Vector, error) {
	select {
	case err := <-s.exited:
		s.exited <- err
		return nil, fmt.Errorf("prometheus exited: %v", err)
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	v, _, _, err := s.api.Query(ctx, q, t)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", q, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("query %s: a %s, want a vector", q, v.Type())
	}
	return vec, nil
}

// WaitFor polls q until it returns one sample of value 1, at most d.
func (s *Server) WaitFor(ctx context.Context, q string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		v, err := s.Query(ctx, q)
		if err == nil && len(v) == 1 && v[0].Value == 1 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not 1 within %s: %v (%v)", q, d, v, err)
		}
		time.Sleep(pollEvery)
	}
}

// Stop kills Prometheus and returns the last lines of its log.
func (s *Server) Stop() string {
	_ = s.cmd.Process.Kill()
	select {
	case err := <-s.exited:
		s.exited <- err
	case <-time.After(stopTimeout):
	}
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}
