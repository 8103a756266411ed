package promrun

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The documented scrape job becomes a file_sd job with the same relabelling; a file that is
// not one job with Kubernetes discovery is refused, so the two cannot drift apart silently.
func TestConfigure(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "monitoring", "prometheus-scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Configure(raw, "/t.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	job := cfg.ScrapeConfigs[0]
	if _, ok := job["kubernetes_sd_configs"]; ok {
		t.Error("kubernetes_sd_configs kept")
	}
	if job["honor_labels"] != true || job["relabel_configs"] == nil || job["job_name"] != "gcsfuse-csi-node" {
		t.Errorf("the documented job's settings are not all kept: %v", job)
	}
	if !strings.Contains(string(out), "/t.json") {
		t.Errorf("no file_sd of the targets:\n%s", out)
	}
	for _, bad := range []string{"scrape_configs: []", "scrape_configs: [{job_name: x, static_configs: []}]"} {
		if _, err := Configure([]byte(bad), "/t.json"); err == nil {
			t.Errorf("Configure(%q) accepted", bad)
		}
	}
}

func TestNodePluginTargets(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "np", Namespace: "gcsfuse-csi", Labels: map[string]string{"app": "gcsfuse-csi-node"}},
		Spec: corev1.PodSpec{NodeName: "vm", Containers: []corev1.Container{
			{Name: "gcsfuse-csi-node", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9920}, {Name: "healthz", ContainerPort: 9808}}},
		}},
		Status: corev1.PodStatus{PodIP: "10.88.0.2"},
	}
	var groups []struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	if err := json.Unmarshal(NodePluginTargets(pod), &groups); err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0].Targets[0] != "10.88.0.2:9920" || groups[0].Labels["__meta_kubernetes_pod_container_port_name"] != "metrics" ||
		groups[1].Labels["__meta_kubernetes_pod_container_name"] != "gcsfuse-csi-node" {
		t.Fatalf("targets %+v", groups)
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := Start(Config{}); err == nil || !strings.Contains(err.Error(), "Binary") {
		t.Fatalf("Start with nothing: %v", err)
	}
}
