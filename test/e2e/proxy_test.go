package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/testpki"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestProxyAndCA (issue 25, on-prem): the driver behind a proxy, with a private CA. A second
// emulator serves HTTPS with a certificate of a CA this test makes, for its Service's DNS
// name, which nothing in the cluster resolves but a proxy pod (the workload image's proxy,
// given the name by hostAliases). One `helm upgrade --reuse-values` points node.gcsEndpoint
// at that name, proxy.httpsProxy at the proxy's Service and caBundle at the CA: a pod then
// writes its object and reads it back through the mount, and the proxy's log shows gcsfuse's
// CONNECT to the emulator, so every byte crossed the proxy and TLS was verified with the CA.
// With the proxy gone, a new pod's volume fails with a GcsfuseFailed Event naming the proxy.
// The values are restored at the end. Added time: two rollouts of the node plugin (~10 s
// each) and three short pods, about 35-45 s.
func TestProxyAndCA(t *testing.T) {
	if helmBin == "" {
		t.Skip("the driver was not installed with Helm (E2E_HELM, E2E_HELM_CHART unset): this test changes the chart's values with helm upgrade")
	}
	start := time.Now()
	ctx := context.Background()
	host := "gcs-tls." + ns + ".svc"
	bucket := "e2e-proxied"
	caPEM, certPEM, keyPEM := e2eCA(t, host)

	// The TLS emulator and the proxy, each behind a Service (no cluster DNS here: the proxy
	// finds the emulator's name in its /etc/hosts, the node plugin is given the proxy's IP).
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gcs-tls"},
		Data: map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	emuIP := createService(t, "gcs-tls", 4443)
	proxyIP := createService(t, "e2e-proxy", 3128)
	nonRoot := &corev1.SecurityContext{RunAsUser: ptr(int64(65534)), RunAsNonRoot: ptr(true), AllowPrivilegeEscalation: ptr(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	mustCreatePod(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gcs-tls", Labels: map[string]string{"app": "gcs-tls"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "emulator", Image: image("emulator"), ImagePullPolicy: corev1.PullNever, SecurityContext: nonRoot,
			Args: []string{"--host=0.0.0.0", "--port=4443", "--public-host=" + host, "--buckets=" + bucket,
				"--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key"},
			VolumeMounts:   []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(4443)}}, PeriodSeconds: 1},
		}}, Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gcs-tls"}}}}}})
	proxyPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "e2e-proxy", Labels: map[string]string{"app": "e2e-proxy"}},
		Spec: corev1.PodSpec{
			HostAliases: []corev1.HostAlias{{IP: emuIP, Hostnames: []string{host}}},
			Containers: []corev1.Container{{
				Name: "proxy", Image: image("workload"), ImagePullPolicy: corev1.PullNever, SecurityContext: nonRoot,
				Command: []string{"/workload"}, Args: []string{"proxy", "-listen", ":3128"},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(3128)}}, PeriodSeconds: 1},
			}}}}
	mustCreatePod(t, proxyPod)

	// One upgrade for the endpoint, the proxy and the CA, restored at the end whatever happens.
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	oldEndpoint := currentValue(t, "node", "gcsEndpoint")
	t.Cleanup(func() {
		helmSet(t, "restore the endpoint, no proxy, no CA", "--set-string", "node.gcsEndpoint="+oldEndpoint,
			"--set", "proxy.httpsProxy=", "--set", "caBundle=")
	})
	proxyURL := "http://" + proxyIP + ":3128"
	waitPodReady(t, "gcs-tls")
	waitPodReady(t, "e2e-proxy")
	helmSet(t, "TLS emulator behind the proxy", "--set-string", "node.gcsEndpoint=https://"+host+":4443/storage/v1/",
		"--set", "proxy.httpsProxy="+proxyURL, "--set-file", "caBundle="+caFile)

	// A pod writes through gcsfuse, which reaches the emulator through the proxy, over TLS
	// verified with the CA.
	name := podName(t, "ok")
	createPod(t, name, podOpts{restart: corev1.RestartPolicyNever, volumes: []volume{{"data", bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "proxied.bin", "-bytes", "65536", "-read-back"}})
	waitSucceeded(t, name)
	// The pod read its object back through the mount (-read-back drops the page cache), from
	// the only endpoint gcsfuse had: the TLS emulator. (Its bucket is not read from this
	// host: test traffic stays inside the cluster's own network namespaces.)
	if l := logs(name, contract.SidecarContainerName); !strings.Contains(l, "https://"+host+":4443/storage/v1/") {
		t.Fatalf("gcsfuse did not run against the TLS emulator; sidecar log:\n%s", l)
	}
	connect := "PROXY CONNECT " + host + ":4443"
	if l := logs("e2e-proxy", "proxy"); !strings.Contains(l, connect) {
		t.Fatalf("the proxy's log has no %q: gcsfuse's traffic did not cross it:\n%s", connect, l)
	}
	record(t, "proxy and CA: helm upgrade -> object written through the proxy", start, time.Now())

	// Failure: the proxy is gone (its Service has no endpoint); a new pod's volume fails,
	// and the Event names the proxy.
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "e2e-proxy", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, ns, "e2e-proxy", 30*time.Second)
	bad := podName(t, "no-proxy")
	createPod(t, bad, podOpts{restart: corev1.RestartPolicyNever, volumes: []volume{{"data", bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", "never.bin", "-bytes", "1024"}})
	waitEvent(t, bad, 60*time.Second, regexp.MustCompile(`^GcsfuseFailed$`), "unreachable through proxy "+proxyURL, bucket)
	record(t, "proxy and CA: whole test (restore excluded)", start, time.Now())
}

// helmSet runs `helm upgrade --reuse-values` with args and waits for the new node plugin.
func helmSet(t *testing.T, what string, args ...string) {
	t.Helper()
	start := time.Now()
	old := nodePluginPod(t).Name
	cmd := append([]string{"upgrade", "gcsfuse-csi", helmChart, "--namespace", driverNamespace,
		"--kubeconfig", suite.Kubeconfig, "--reuse-values"}, args...)
	out, err := exec.Command(helmBin, cmd...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm upgrade (%s): %v\n%s", what, err, out)
	}
	waitNewNodePlugin(t, old)
	waitWebhookSettled(t)
	record(t, "helm upgrade ("+what+") -> node plugin rolled", start, time.Now())
}

// currentValue is a value of the release ("" when unset), for restoring it.
func currentValue(t *testing.T, section, key string) string {
	t.Helper()
	out, err := exec.Command(helmBin, "get", "values", "gcsfuse-csi", "--namespace", driverNamespace,
		"--kubeconfig", suite.Kubeconfig, "--all", "-o", "json").Output()
	if err != nil {
		t.Fatalf("helm get values: %v", err)
	}
	var v map[string]any // top-level values are of every kind (driverName is a string)
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("helm get values: %v", err)
	}
	sec, _ := v[section].(map[string]any)
	s, _ := sec[key].(string)
	return s
}

// createService makes a ClusterIP Service name -> pods labelled app=name on port, and
// returns its IP.
func createService(t *testing.T, name string, port int32) string {
	t.Helper()
	svc, err := cs.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(port)}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	return svc.Spec.ClusterIP
}

func mustCreatePod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p.Namespace = ns
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
}

func waitPodReady(t *testing.T, name string) {
	t.Helper()
	waitPod(t, name, 60*time.Second, "ready", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
}

// e2eCA makes a CA and a serving certificate it signed for host (internal/testing/testpki): the
// CA's PEM, the certificate's and its key's.
func e2eCA(t *testing.T, host string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	issued, err := testpki.Issue("gcsfuse-csi e2e CA", host, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return issued.CAPEM, issued.CertPEM, issued.KeyPEM
}
