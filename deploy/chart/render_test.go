package chart

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// The objects and containers the checks look at, by name.
const (
	nodeName    = "gcsfuse-csi-node" // DaemonSet and its container
	webhookName = "gcsfuse-webhook"  // Deployment, its container, Service, MutatingWebhookConfiguration, Certificate
	// controllerName is the controller's Deployment, its container, ServiceAccount, and its
	// ClusterRole, Role and their bindings.
	controllerName = "gcsfuse-csi-controller"
	mounterName    = "gcsfuse-csi-mounter" // the shared mounter's DaemonSet and its pods' app label
)

// named returns the item of items whose nameOf is name, failing the test (naming what it
// looked for) when there is none.
func named[T any](t *testing.T, items []T, nameOf func(T) string, what, name string) T {
	t.Helper()
	for _, it := range items {
		if nameOf(it) == name {
			return it
		}
	}
	t.Fatalf("no %s %s in the pod spec", what, name)
	var zero T
	return zero
}

// container returns the container named name of a pod spec.
func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	return named(t, spec.Containers, func(c corev1.Container) string { return c.Name }, "container", name)
}

func nodeContainer(t *testing.T, r rendering) corev1.Container {
	t.Helper()
	return container(t, only[*appsv1.DaemonSet](t, r, nodeName).Spec.Template.Spec, nodeName)
}

func webhookContainer(t *testing.T, r rendering) corev1.Container {
	t.Helper()
	return container(t, only[*appsv1.Deployment](t, r, webhookName).Spec.Template.Spec, webhookName)
}

func controllerContainer(t *testing.T, r rendering) corev1.Container {
	t.Helper()
	return container(t, only[*appsv1.Deployment](t, r, controllerName).Spec.Template.Spec, controllerName)
}

// mounterContainer is the shared mounter's one container, named as the node plugin knows it.
func mounterContainer(t *testing.T, r rendering) corev1.Container {
	t.Helper()
	return container(t, only[*appsv1.DaemonSet](t, r, mounterName).Spec.Template.Spec, contract.SharedMounterContainerName)
}

// wantArg fails t unless the container has the argument arg.
func wantArg(t *testing.T, c corev1.Container, arg string) {
	t.Helper()
	if !slices.Contains(c.Args, arg) {
		t.Errorf("container %s: no argument %s among %q", c.Name, arg, c.Args)
	}
}

// refuteArg fails t for each argument of the container that starts with prefix.
func refuteArg(t *testing.T, c corev1.Container, prefix string) {
	t.Helper()
	for _, a := range c.Args {
		if strings.HasPrefix(a, prefix) {
			t.Errorf("container %s: argument %s, want none starting with %s", c.Name, a, prefix)
		}
	}
}

// refuteKind fails t for each object of a kind in the render.
func refuteKind(t *testing.T, r rendering, kind string) {
	t.Helper()
	for _, o := range r.ofKind(kind) {
		t.Errorf("rendered %s, want no %s", o, kind)
	}
}

// volume returns the pod spec's volume named name.
func volume(t *testing.T, spec corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	return named(t, spec.Volumes, func(v corev1.Volume) string { return v.Name }, "volume", name)
}

// TestDefaults checks what the default values give that the other renders change: the
// webhook highly available, the default token audience and port, no optional objects.
func TestDefaults(t *testing.T) {
	r := render(t, defaultNS)
	dep := only[*appsv1.Deployment](t, r, webhookName)
	t.Run("the webhook's API client not at client-go's 5 a second", func(t *testing.T) {
		c := webhookContainer(t, r)
		wantArg(t, c, "--kube-api-qps=500")
		wantArg(t, c, "--kube-api-burst=1000")
		// Helm prints a large number from values (JSON, a file) as 1e+06, which the flag refuses.
		big := webhookContainer(t, render(t, defaultNS, "--set-json", "webhook.kubeAPIBurst=1000000"))
		wantArg(t, big, "--kube-api-burst=1000000")
	})
	t.Run("two webhook replicas", func(t *testing.T) {
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 2 {
			t.Errorf("webhook Deployment replicas %v, want 2", dep.Spec.Replicas)
		}
	})
	t.Run("a PodDisruptionBudget: drains evict one replica at a time", func(t *testing.T) {
		pdb := only[*policyv1.PodDisruptionBudget](t, r, webhookName)
		if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
			t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
		}
		if pdb.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget minAvailable %v, want none (it would block a drain with one replica)", pdb.Spec.MinAvailable)
		}
		if got, want := pdb.Spec.Selector.MatchLabels, dep.Spec.Selector.MatchLabels; !maps.Equal(got, want) {
			t.Errorf("PodDisruptionBudget selects %v, the webhook Deployment's pods are %v", got, want)
		}
	})
	t.Run("rolling update: the new replica ready before an old one stops", func(t *testing.T) {
		ru := dep.Spec.Strategy.RollingUpdate
		if dep.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil || *ru.MaxUnavailable != intstr.FromInt32(0) {
			t.Errorf("webhook Deployment strategy %+v, want RollingUpdate with maxUnavailable 0", dep.Spec.Strategy)
		}
	})
	t.Run("replicas spread over nodes, preferred only", func(t *testing.T) {
		aff := dep.Spec.Template.Spec.Affinity
		if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			t.Fatalf("webhook pods: no preferred pod anti-affinity: %+v", aff)
		}
		// Nowhere a required term: a one-node cluster could not schedule the second replica.
		seen := map[string]bool{}
		r.scalars(func(o object, path, _ string) {
			if i := strings.Index(path, "requiredDuringScheduling"); i >= 0 && !seen[o.String()+path[:i]] {
				seen[o.String()+path[:i]] = true
				t.Errorf("%s has a required scheduling term (%s); a one-node cluster could not schedule the second replica", o, path)
			}
		})
		term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
		if term.TopologyKey != corev1.LabelHostname {
			t.Errorf("webhook pods spread by %q, want %s", term.TopologyKey, corev1.LabelHostname)
		}
	})
	t.Run("readiness probe", func(t *testing.T) {
		p := webhookContainer(t, r).ReadinessProbe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" {
			t.Errorf("webhook readiness probe %+v, want an HTTP GET of /readyz", p)
		}
	})
	t.Run("default token audience", func(t *testing.T) {
		wantArg(t, nodeContainer(t, r), "--wif-token-audience=gcsfuse.csi.storage")
		wantAudiences(t, only[*storagev1.CSIDriver](t, r, "gcsfuse.csi.storage"), "gcsfuse.csi.storage")
	})
	t.Run("default webhook port: one a GKE private cluster's control plane reaches", func(t *testing.T) {
		wantArg(t, webhookContainer(t, r), "--listen=:10250")
	})
	t.Run("a quota for the node plugin's priority class: GKE creates no pod without it", func(t *testing.T) {
		only[*corev1.ResourceQuota](t, r, "gcsfuse-csi-critical-pods")
	})
	t.Run("no cert-manager object", func(t *testing.T) {
		for _, o := range r {
			if api, _ := o.generic["apiVersion"].(string); strings.HasPrefix(api, "cert-manager.io/") {
				t.Errorf("rendered %s (%s) with cert-manager off", o, api)
			}
		}
	})
	t.Run("no proxy", func(t *testing.T) {
		c := nodeContainer(t, r)
		for _, p := range []string{"--https-proxy=", "--http-proxy=", "--no-proxy="} {
			refuteArg(t, c, p)
		}
	})
	t.Run("no CA bundle", func(t *testing.T) {
		refuteScalar(t, r, "no caBundle given", regexp.MustCompile(`ca-bundle`))
	})
}

// wantAudiences fails t unless the CSIDriver asks the kubelet for tokens of exactly these
// audiences.
func wantAudiences(t *testing.T, d *storagev1.CSIDriver, want ...string) {
	t.Helper()
	var got []string
	for _, tr := range d.Spec.TokenRequests {
		got = append(got, tr.Audience)
	}
	if !slices.Equal(got, want) {
		t.Errorf("CSIDriver %s tokenRequests audiences %q, want %q", d.Name, got, want)
	}
}

// edgeValues are values far from the defaults: another namespace, registry with a port,
// kubelet directory, driver name (the GKE driver's), no token audience, metrics and the
// admission policy and PodDisruptionBudget off.
var edgeValues = []string{
	"--set", "images.node.repository=registry.example.com:5000/team/gcsfuse-csi-node,images.node.tag=v1.2.3,images.node.pullPolicy=IfNotPresent",
	"--set", "images.webhook.repository=registry.example.com/team/webhook,images.webhook.tag=v1.2.3",
	"--set", "images.controller.repository=registry.example.com/team/controller,images.controller.tag=v1.2.3",
	"--set", "images.sidecar.repository=registry.example.com/team/sidecar,images.sidecar.tag=v1.2.3",
	"--set", "kubeletDir=" + edgeKubelet,
	"--set", "node.runtimeEndpoint=unix:///run/k3s/containerd/containerd.sock,node.machineType=lookup",
	"--set", "node.gcsEndpoint=http://10.0.0.1:4443/storage/v1/", "--set", "node.extraArgs={-v}",
	"--set", "webhook.replicas=3,webhook.failurePolicy=Ignore,webhook.logLevel=debug",
	"--set", "webhook.podDisruptionBudget.enabled=false", "--set", "driverName=" + edgeDriver,
	"--set", "webhook.tls.secretName=my-cert,webhook.tls.certManagerInject=storage-system/gcsfuse-webhook",
	"--set", "webhook.tls.caBundle=Q0EK", "--set", "admissionPolicy.enabled=false", "--set", "tokenRequest.audience=",
	"--set", "node.metricsPort=0", "--set-string", "node.podAnnotations.team=storage",
	"--set", "images.sidecar.pullSecrets={team-registry,other-registry}", "--set", "imagePullSecrets[0].name=team-registry",
}

const (
	edgeKubelet = "/var/snap/microk8s/common/var/lib/kubelet"
	edgeDriver  = "gcsfuse.csi.storage.gke.io"
)

func TestEdgeValues(t *testing.T) {
	r := render(t, otherNS, edgeValues...)
	node, webhook, controller, mounter := nodeContainer(t, r), webhookContainer(t, r), controllerContainer(t, r), mounterContainer(t, r)
	ds := only[*appsv1.DaemonSet](t, r, nodeName)
	mds := only[*appsv1.DaemonSet](t, r, mounterName)
	dep := only[*appsv1.Deployment](t, r, webhookName)
	ctl := only[*appsv1.Deployment](t, r, controllerName)
	driver := only[*storagev1.CSIDriver](t, r, edgeDriver)
	mwc := only[*admissionv1.MutatingWebhookConfiguration](t, r, webhookName)
	if len(mwc.Webhooks) != 2 {
		t.Fatalf("MutatingWebhookConfiguration: %d webhooks, want 2 (inject, inject-claims)", len(mwc.Webhooks))
	}

	t.Run("images", func(t *testing.T) {
		if want := "registry.example.com:5000/team/gcsfuse-csi-node:v1.2.3"; node.Image != want {
			t.Errorf("node plugin image %s, want %s", node.Image, want)
		}
		if want := "registry.example.com/team/webhook:v1.2.3"; webhook.Image != want {
			t.Errorf("webhook image %s, want %s", webhook.Image, want)
		}
		if want := "registry.example.com/team/controller:v1.2.3"; controller.Image != want {
			t.Errorf("controller image %s, want %s", controller.Image, want)
		}
		if want := "registry.example.com/team/sidecar:v1.2.3"; mounter.Image != want {
			t.Errorf("mounter image %s, want the sidecar's, %s", mounter.Image, want)
		}
	})
	t.Run("pull policy", func(t *testing.T) {
		if node.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("node plugin imagePullPolicy %q, want IfNotPresent", node.ImagePullPolicy)
		}
	})
	t.Run("sidecar image reaches the webhook", func(t *testing.T) {
		wantArg(t, webhook, "--sidecar-image=registry.example.com/team/sidecar:v1.2.3")
	})
	t.Run("sidecar pull secrets reach the webhook", func(t *testing.T) {
		wantArg(t, webhook, "--sidecar-image-pull-secrets=team-registry,other-registry")
	})
	t.Run("imagePullSecrets on the node plugin, mounter, webhook and controller pods", func(t *testing.T) {
		want := []corev1.LocalObjectReference{{Name: "team-registry"}}
		for what, spec := range map[string]corev1.PodSpec{"node plugin": ds.Spec.Template.Spec, "mounter": mds.Spec.Template.Spec, "webhook": dep.Spec.Template.Spec, "controller": ctl.Spec.Template.Spec} {
			if !slices.Equal(spec.ImagePullSecrets, want) {
				t.Errorf("%s pods: imagePullSecrets %v, want %v", what, spec.ImagePullSecrets, want)
			}
		}
	})
	t.Run("node.extraArgs", func(t *testing.T) { wantArg(t, node, "-v") })
	t.Run("kubelet dir", func(t *testing.T) {
		wantArg(t, node, "--kubelet-root="+edgeKubelet)
		if v := volume(t, ds.Spec.Template.Spec, "kubelet-dir"); v.HostPath == nil || v.HostPath.Path != edgeKubelet {
			t.Errorf("node plugin volume kubelet-dir %+v, want hostPath %s", v.VolumeSource, edgeKubelet)
		}
	})
	t.Run("kubelet dir and driver name in the shared mounter's hand-off directory", func(t *testing.T) {
		wantSharedDir(t, r, edgeKubelet, edgeDriver)
	})
	t.Run("kubelet dir everywhere", func(t *testing.T) {
		refuteScalar(t, r, "the default kubelet directory left", regexp.MustCompile(`(^|[ =])/var/lib/kubelet`))
	})
	t.Run("no Namespace object by default", func(t *testing.T) { refuteKind(t, r, "Namespace") })
	t.Run("admission policy off", func(t *testing.T) {
		refuteKind(t, r, "ValidatingAdmissionPolicy")
		refuteKind(t, r, "ValidatingAdmissionPolicyBinding")
	})
	t.Run("no token request without an audience", func(t *testing.T) {
		wantAudiences(t, driver)
		if driver.Spec.RequiresRepublish == nil || *driver.Spec.RequiresRepublish {
			t.Errorf("CSIDriver requiresRepublish %v, want false: there is no token to refresh", driver.Spec.RequiresRepublish)
		}
		wantArg(t, node, "--wif-token-audience=")
	})
	t.Run("metrics off", func(t *testing.T) {
		refuteArg(t, node, "--metrics-addr")
		if _, ok := ds.Spec.Template.Annotations["prometheus.io/scrape"]; ok {
			t.Errorf("node plugin pods annotated prometheus.io/scrape with node.metricsPort=0")
		}
		if len(node.Ports) != 0 {
			t.Errorf("node plugin container ports %v with node.metricsPort=0", node.Ports)
		}
	})
	t.Run("pod annotations", func(t *testing.T) {
		if got := ds.Spec.Template.Annotations["team"]; got != "storage" {
			t.Errorf("node plugin pod annotation team=%q, want storage (annotations %v)", got, ds.Spec.Template.Annotations)
		}
	})
	t.Run("runtime endpoint", func(t *testing.T) {
		wantArg(t, node, "--runtime-endpoint=unix:///run/k3s/containerd/containerd.sock")
	})
	t.Run("machine type", func(t *testing.T) { wantArg(t, node, "--machine-type=lookup") })
	t.Run("gcs endpoint", func(t *testing.T) { wantArg(t, node, "--gcs-endpoint=http://10.0.0.1:4443/storage/v1/") })
	t.Run("the controller uses node.gcsEndpoint too", func(t *testing.T) {
		wantArg(t, controller, "--gcs-endpoint=http://10.0.0.1:4443/storage/v1/")
	})
	t.Run("replicas", func(t *testing.T) {
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
			t.Errorf("webhook Deployment replicas %v, want 3", dep.Spec.Replicas)
		}
	})
	t.Run("PodDisruptionBudget off", func(t *testing.T) { refuteKind(t, r, "PodDisruptionBudget") })

	// driverName: the CSIDriver (only above), the name the node plugin registers and its
	// sockets, what the webhook (flag and matchConditions) takes as the driver's volumes,
	// and the provisioner name the controller serves; nowhere the default name.
	t.Run("driverName reaches the node plugin, the webhook and the controller", func(t *testing.T) {
		wantArg(t, node, "--driver-name="+edgeDriver)
		wantArg(t, webhook, "--driver-name="+edgeDriver)
		wantArg(t, controller, "--driver-name="+edgeDriver)
		wantArg(t, node, "--registration-socket="+edgeKubelet+"/plugins_registry/"+edgeDriver+"-reg.sock")
		wantArg(t, node, "--kubelet-csi-endpoint="+edgeKubelet+"/plugins/"+edgeDriver+"/csi.sock")
		if v := volume(t, ds.Spec.Template.Spec, "plugin-dir"); v.HostPath == nil || v.HostPath.Path != edgeKubelet+"/plugins/"+edgeDriver {
			t.Errorf("node plugin volume plugin-dir %+v, want hostPath %s/plugins/%s", v.VolumeSource, edgeKubelet, edgeDriver)
		}
	})
	t.Run("driverName in both webhooks' matchConditions", func(t *testing.T) {
		for _, w := range mwc.Webhooks {
			found := false
			for _, mc := range w.MatchConditions {
				found = found || strings.Contains(mc.Expression, "v.csi.driver == '"+edgeDriver+"'")
			}
			if !found {
				t.Errorf("webhook %s: no matchCondition compares v.csi.driver with '%s': %+v", w.Name, edgeDriver, w.MatchConditions)
			}
		}
	})
	t.Run("driverName the GKE driver's: its annotations on the entry that fails closed", func(t *testing.T) {
		if !strings.Contains(mwc.Webhooks[0].MatchConditions[0].Expression, "'gke-gcsfuse/'") {
			t.Errorf("webhook %s does not match gke-gcsfuse/ annotations installed as %s: %s", mwc.Webhooks[0].Name, edgeDriver, mwc.Webhooks[0].MatchConditions[0].Expression)
		}
	})
	t.Run("driverName: the default name left nowhere", func(t *testing.T) {
		refuteScalar(t, r, "the default driver name left", regexp.MustCompile(`(?m)(^|[ =/'])gcsfuse\.csi\.storage('|/csi|/shared|-reg|$)`))
	})
	t.Run("failure policy reaches both webhooks", func(t *testing.T) {
		for _, w := range mwc.Webhooks {
			if w.FailurePolicy == nil || *w.FailurePolicy != admissionv1.Ignore {
				t.Errorf("webhook %s failurePolicy %v, want Ignore", w.Name, w.FailurePolicy)
			}
		}
	})
	t.Run("log level", func(t *testing.T) { wantArg(t, webhook, "--log-level=debug") })
	t.Run("tls secret", func(t *testing.T) {
		if v := volume(t, dep.Spec.Template.Spec, "tls"); v.Secret == nil || v.Secret.SecretName != "my-cert" {
			t.Errorf("webhook volume tls %+v, want Secret my-cert", v.VolumeSource)
		}
	})
	t.Run("cert-manager CA injection", func(t *testing.T) {
		if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != "storage-system/gcsfuse-webhook" {
			t.Errorf("MutatingWebhookConfiguration annotation cert-manager.io/inject-ca-from=%q, want storage-system/gcsfuse-webhook", got)
		}
	})
	t.Run("webhook clientConfig: caBundle and the Service in the release namespace", func(t *testing.T) {
		for _, w := range mwc.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, []byte("CA\n")) {
				t.Errorf("webhook %s caBundle %q, want the decoded webhook.tls.caBundle %q", w.Name, w.ClientConfig.CABundle, "CA\n")
			}
			if s := w.ClientConfig.Service; s == nil || s.Name != webhookName || s.Namespace != otherNS {
				t.Errorf("webhook %s calls Service %+v, want %s/%s", w.Name, s, otherNS, webhookName)
			}
		}
	})
	t.Run("own namespace skipped", func(t *testing.T) {
		for _, w := range mwc.Webhooks {
			if !skipsNamespaces(w.NamespaceSelector, "kube-system", otherNS) {
				t.Errorf("webhook %s namespaceSelector %+v, want kubernetes.io/metadata.name NotIn [kube-system %s]", w.Name, w.NamespaceSelector, otherNS)
			}
		}
	})
	t.Run("no object left in the default namespace", func(t *testing.T) {
		r.scalars(func(o object, path, value string) {
			if (path == "namespace" || strings.HasSuffix(path, ".namespace")) && value == defaultNS {
				t.Errorf("%s %s = %s, want %s", o, path, value, otherNS)
			}
		})
	})
}

// skipsNamespaces reports whether a webhook's namespaceSelector leaves out exactly these
// namespaces by name.
func skipsNamespaces(sel *metav1.LabelSelector, names ...string) bool {
	if sel == nil || len(sel.MatchExpressions) != 1 {
		return false
	}
	e := sel.MatchExpressions[0]
	return e.Key == corev1.LabelMetadataName && e.Operator == "NotIn" && slices.Equal(e.Values, names)
}

func TestTokenAudience(t *testing.T) {
	const audience = "my-project.svc.id.goog"
	r := render(t, defaultNS, "--set", "tokenRequest.audience="+audience)
	t.Run("the CSIDriver asks the kubelet for it", func(t *testing.T) {
		wantAudiences(t, only[*storagev1.CSIDriver](t, r, "gcsfuse.csi.storage"), audience)
	})
	t.Run("the node plugin exchanges it", func(t *testing.T) {
		wantArg(t, nodeContainer(t, r), "--wif-token-audience="+audience)
		refuteArg(t, nodeContainer(t, r), "--wif-token-audience=gcsfuse.csi.storage")
	})
}

// show renders one template in otherNS.
func show(t *testing.T, template string, args ...string) rendering {
	t.Helper()
	return render(t, otherNS, append([]string{"--show-only", "templates/" + template}, args...)...)
}

// TestCertManager renders the cert-manager option only (cert-manager is not installed
// here): the serving Certificate names the webhook Service, writes the Secret the webhook
// mounts and is signed by the chart's CA, whose CA the API server is given by injection.
func TestCertManager(t *testing.T) {
	cm := []string{"--set", "webhook.tls.certManager.enabled=true", "--set", "webhook.tls.secretName=webhook-cert"}
	certs := show(t, "webhook/certificate.yaml", cm...)
	cert := onlyGeneric(t, certs, "Certificate", webhookName)
	mwc := only[*admissionv1.MutatingWebhookConfiguration](t, show(t, "webhook/mutating-webhook.yaml", cm...), webhookName)

	t.Run("the DNS names are the webhook Service's", func(t *testing.T) {
		svc := only[*corev1.Service](t, show(t, "webhook/service.yaml", cm...), webhookName)
		var dns []string
		names, _ := field(cert, "spec.dnsNames").([]any)
		for _, n := range names {
			dns = append(dns, fmt.Sprint(n))
		}
		s := svc.Name + "." + otherNS
		want := []string{svc.Name, s, s + ".svc", s + ".svc.cluster.local"}
		if !slices.Equal(dns, want) {
			t.Errorf("Certificate dnsNames %q, want the Service's names %q", dns, want)
		}
		for _, w := range mwc.Webhooks {
			if s := w.ClientConfig.Service; s == nil || s.Name != svc.Name || s.Namespace != otherNS {
				t.Errorf("webhook %s calls Service %+v, want %s/%s", w.Name, s, otherNS, svc.Name)
			}
		}
	})
	t.Run("the Certificate writes the Secret the webhook mounts", func(t *testing.T) {
		if got := field(cert, "spec.secretName"); got != "webhook-cert" {
			t.Errorf("Certificate secretName %v, want webhook-cert", got)
		}
		dep := only[*appsv1.Deployment](t, show(t, "webhook/deployment.yaml", cm...), webhookName)
		if v := volume(t, dep.Spec.Template.Spec, "tls"); v.Secret == nil || v.Secret.SecretName != "webhook-cert" {
			t.Errorf("webhook volume tls %+v, want Secret webhook-cert", v.VolumeSource)
		}
	})
	t.Run("signed by the chart's CA Issuer", func(t *testing.T) {
		if got := field(cert, "spec.issuerRef.name"); got != "gcsfuse-webhook-ca-issuer" {
			t.Errorf("Certificate issuerRef.name %v, want gcsfuse-webhook-ca-issuer", got)
		}
		ca := onlyGeneric(t, certs, "Issuer", "gcsfuse-webhook-ca-issuer")
		if got := field(ca, "spec.ca.secretName"); got != "gcsfuse-webhook-ca" {
			t.Errorf("CA Issuer ca.secretName %v, want gcsfuse-webhook-ca (the CA Certificate's Secret)", got)
		}
		caCert := onlyGeneric(t, certs, "Certificate", "gcsfuse-webhook-ca")
		if got := field(caCert, "spec.secretName"); got != "gcsfuse-webhook-ca" {
			t.Errorf("CA Certificate secretName %v, want gcsfuse-webhook-ca", got)
		}
	})
	t.Run("CA injection from the Certificate, no caBundle to set by hand", func(t *testing.T) {
		if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != otherNS+"/"+webhookName {
			t.Errorf("MutatingWebhookConfiguration annotation cert-manager.io/inject-ca-from=%q, want %s/%s", got, otherNS, webhookName)
		}
		for _, w := range mwc.Webhooks {
			if len(w.ClientConfig.CABundle) != 0 {
				t.Errorf("webhook %s has a caBundle; cert-manager injects it", w.Name)
			}
		}
	})
	t.Run("a given ClusterIssuer signs, no Issuer of the chart's", func(t *testing.T) {
		ref := show(t, "webhook/certificate.yaml", append(cm, "--set", "webhook.tls.certManager.issuerRef.name=corp-ca",
			"--set", "webhook.tls.certManager.issuerRef.kind=ClusterIssuer")...)
		refuteKind(t, ref, "Issuer")
		c := onlyGeneric(t, ref, "Certificate", webhookName)
		if name, kind := field(c, "spec.issuerRef.name"), field(c, "spec.issuerRef.kind"); name != "corp-ca" || kind != "ClusterIssuer" {
			t.Errorf("Certificate issuerRef %v/%v, want ClusterIssuer/corp-ca", kind, name)
		}
	})
}

// TestWebhookPort: the control plane of a GKE private cluster reaches the nodes on 443 and
// 10250 only. The port the webhook listens on, the container port, the probes and the
// Service's targetPort must move together.
func TestWebhookPort(t *testing.T) {
	port := []string{"--set", "webhook.port=9443"}
	deploy := show(t, "webhook/deployment.yaml", port...)
	c := webhookContainer(t, deploy)
	t.Run("the webhook listens on it", func(t *testing.T) { wantArg(t, c, "--listen=:9443") })
	t.Run("the container port named https", func(t *testing.T) {
		if len(c.Ports) != 1 || c.Ports[0].Name != "https" || c.Ports[0].ContainerPort != 9443 {
			t.Errorf("webhook container ports %+v, want one, https: 9443", c.Ports)
		}
	})
	t.Run("the default port left nowhere", func(t *testing.T) {
		refuteScalar(t, deploy, "webhook.port=9443", regexp.MustCompile(`10250`))
	})
	t.Run("the probes use the port named https", func(t *testing.T) {
		for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Port != intstr.FromString("https") {
				t.Errorf("webhook %s probe %+v, want an HTTP GET on port https", what, p)
			}
		}
	})
	t.Run("the Service forwards 443 to the port named https", func(t *testing.T) {
		svc := only[*corev1.Service](t, show(t, "webhook/service.yaml", port...), webhookName)
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort != intstr.FromString("https") {
			t.Errorf("webhook Service ports %+v, want 443 -> https", svc.Spec.Ports)
		}
	})
}

// TestPriorityQuota: node.priorityQuota.create (on by default) makes a ResourceQuota scoped to the priority
// classes of the node plugin and of the mounter in the release namespace (GKE admits
// system-node-critical pods only in a namespace with one); none by default (TestDefaults).
func TestPriorityQuota(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, show(t, "node/daemonset.yaml"), nodeName)
	if pc := ds.Spec.Template.Spec.PriorityClassName; pc != "system-node-critical" {
		t.Fatalf("node plugin priorityClassName %q, want system-node-critical by default", pc)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		classes []string
	}{
		{"the DaemonSet's priority class, the mounter's too", nil, []string{ds.Spec.Template.Spec.PriorityClassName}},
		{"follows node.priorityClassName", []string{"--set", "node.priorityClassName=custom-critical"}, []string{"custom-critical", "system-node-critical"}},
		{"and mounter.priorityClassName", []string{"--set", "mounter.priorityClassName=custom-critical"}, []string{"system-node-critical", "custom-critical"}},
		{"without the mounter, the node plugin's alone", []string{"--set", "mounter.enabled=false,mounter.priorityClassName=custom-critical"}, []string{"system-node-critical"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := only[*corev1.ResourceQuota](t, show(t, "node/priority-quota.yaml", tc.args...), "gcsfuse-csi-critical-pods")
			if q.Namespace != otherNS {
				t.Errorf("ResourceQuota in namespace %q, want the release's, %s", q.Namespace, otherNS)
			}
			if pods, ok := q.Spec.Hard[corev1.ResourcePods]; !ok || pods.Cmp(resource.MustParse("1G")) != 0 {
				t.Errorf("ResourceQuota hard pods %v, want a generous 1G", q.Spec.Hard)
			}
			want := []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: tc.classes}}
			if q.Spec.ScopeSelector == nil || !slices.EqualFunc(q.Spec.ScopeSelector.MatchExpressions, want, func(a, b corev1.ScopedResourceSelectorRequirement) bool {
				return a.ScopeName == b.ScopeName && a.Operator == b.Operator && slices.Equal(a.Values, b.Values)
			}) {
				t.Errorf("ResourceQuota scopeSelector %+v, want PriorityClass In %v", q.Spec.ScopeSelector, tc.classes)
			}
		})
	}
	t.Run("none with node.priorityQuota.create=false", func(t *testing.T) {
		refuteKind(t, render(t, defaultNS, "--set", "node.priorityQuota.create=false"), "ResourceQuota")
	})
}

// TestProxyAndCABundle: proxy.* and caBundle reach the node plugin (which hands them to
// each volume's gcsfuse); caBundleConfigMap uses a ConfigMap the user made.
func TestProxyAndCABundle(t *testing.T) {
	pem := "-----BEGIN CERTIFICATE-----\nMIIBAA==\n-----END CERTIFICATE-----\n"
	pemFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(pemFile, []byte(pem), 0o644); err != nil {
		t.Fatal(err)
	}
	px := []string{"--set", "proxy.httpsProxy=http://proxy.corp:3128,proxy.httpProxy=http://proxy.corp:3129",
		"--set", `proxy.noProxy=.svc\,10.0.0.0/8`, "--set-file", "caBundle=" + pemFile}
	ds := only[*appsv1.DaemonSet](t, show(t, "node/daemonset.yaml", px...), nodeName)
	c := container(t, ds.Spec.Template.Spec, nodeName)
	t.Run("proxy reaches the node plugin", func(t *testing.T) {
		wantArg(t, c, "--https-proxy=http://proxy.corp:3128")
		wantArg(t, c, "--http-proxy=http://proxy.corp:3129")
		wantArg(t, c, "--no-proxy=.svc,10.0.0.0/8")
	})
	t.Run("caBundle: the node plugin reads the mounted file of the chart's ConfigMap", func(t *testing.T) {
		wantArg(t, c, "--ca-bundle-file=/etc/gcsfuse-csi/ca/ca.crt")
		wantCAMount(t, ds, c, "gcsfuse-csi-ca-bundle")
	})
	t.Run("caBundle: a new bundle rolls the node plugin", func(t *testing.T) {
		sum := sha256.Sum256([]byte(pem))
		if got, want := ds.Spec.Template.Annotations["gcsfuse.csi.storage/ca-bundle-sha256"], hex.EncodeToString(sum[:]); got != want {
			t.Errorf("node plugin pod annotation gcsfuse.csi.storage/ca-bundle-sha256=%q, want the bundle's SHA-256 %s", got, want)
		}
	})
	t.Run("caBundle: a ConfigMap in the release namespace with the PEM under ca.crt", func(t *testing.T) {
		cm := only[*corev1.ConfigMap](t, show(t, "node/ca-bundle.yaml", px...), "gcsfuse-csi-ca-bundle")
		if cm.Namespace != otherNS {
			t.Errorf("ConfigMap in namespace %q, want the release's, %s", cm.Namespace, otherNS)
		}
		if got := cm.Data["ca.crt"]; got != pem {
			t.Errorf("ConfigMap ca.crt %q, want the PEM %q", got, pem)
		}
	})
	t.Run("caBundleConfigMap: its name and key", func(t *testing.T) {
		ds := only[*appsv1.DaemonSet](t, show(t, "node/daemonset.yaml", "--set", "caBundleConfigMap.name=corp-roots,caBundleConfigMap.key=roots.pem"), nodeName)
		c := container(t, ds.Spec.Template.Spec, nodeName)
		wantArg(t, c, "--ca-bundle-file=/etc/gcsfuse-csi/ca/roots.pem")
		wantCAMount(t, ds, c, "corp-roots")
	})
	t.Run("caBundleConfigMap: no ConfigMap of the chart's", func(t *testing.T) {
		out, err := templateText(t, otherNS, "--show-only", "templates/node/ca-bundle.yaml", "--set", "caBundleConfigMap.name=corp-roots")
		if err == nil {
			if r := parse(t, out); len(r) != 0 {
				t.Errorf("with caBundleConfigMap.name the chart rendered %s", r)
			}
		}
	})
}

// wantCAMount fails t unless the node plugin mounts ConfigMap name where --ca-bundle-file
// points.
func wantCAMount(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container, name string) {
	t.Helper()
	if v := volume(t, ds.Spec.Template.Spec, "ca-bundle"); v.ConfigMap == nil || v.ConfigMap.Name != name {
		t.Errorf("node plugin volume ca-bundle %+v, want ConfigMap %s", v.VolumeSource, name)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "ca-bundle" && m.MountPath == "/etc/gcsfuse-csi/ca"
	}) {
		t.Errorf("node plugin: volume ca-bundle not mounted at /etc/gcsfuse-csi/ca: %+v", c.VolumeMounts)
	}
}

// TestImageDigests: a digest pins each image as repository:tag@digest, the sidecar the
// webhook injects and the mounter's included; a malformed digest is refused.
func TestImageDigests(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	var args []string
	for _, img := range []string{"node", "webhook", "controller", "sidecar"} {
		args = append(args, "--set", "images."+img+".digest="+d, "--set", "images."+img+".repository=registry.example.com/gcsfuse-csi/"+img, "--set", "images."+img+".tag=v0.2.0")
	}
	r := render(t, otherNS, args...)
	want := func(img string) string { return "registry.example.com/gcsfuse-csi/" + img + ":v0.2.0@" + d }
	for got, img := range map[string]string{nodeContainer(t, r).Image: "node", webhookContainer(t, r).Image: "webhook",
		controllerContainer(t, r).Image: "controller", mounterContainer(t, r).Image: "sidecar"} {
		if got != want(img) {
			t.Errorf("%s image %q, want %q", img, got, want(img))
		}
	}
	wantArg(t, webhookContainer(t, r), "--sidecar-image="+want("sidecar"))
	if _, err := templateText(t, otherNS, "--set", "images.node.digest=sha256:abc"); err == nil {
		t.Error("a malformed digest rendered")
	}
}
