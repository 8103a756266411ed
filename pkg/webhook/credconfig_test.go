package webhook

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
)

// configMaps is a ConfigMaps from a table (namespace/name); "broken" fails the read.
type configMaps map[string]map[string]string

func (c configMaps) ConfigMap(_ context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	if name == "broken" {
		return nil, errors.New("the API server is unavailable")
	}
	data, ok := c[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	return &corev1.ConfigMap{Data: data}, nil
}

const wifConfig = `{"type": "external_account",
  "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1",
  "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": "https://sts.googleapis.com/v1/token",
  "credential_source": {"file": "/var/run/service-account/token", "format": {"type": "text"}}}`

func credMutator(t *testing.T, federated bool) *Mutator {
	t.Helper()
	cfg := testConfig()
	cfg.ConfigMaps = configMaps{"ns/wif": {"credential-configuration.json": wifConfig}, "ns/two": {"a": wifConfig, "b": wifConfig},
		"ns/evil": {"c.json": strings.Replace(wifConfig, "https://sts.googleapis.com/v1/token", "http://evil.example/token", 1)}}
	cfg.NodeFederated = federated
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A pod naming its credential ConfigMap (ours or the GKE driver's annotation) gets its
// token projected for the provider's default audience where the configuration reads it,
// mounted read-only in the sidecar alone, and the configuration as checked in the
// sidecar's environment (no volume of the ConfigMap: the pod's spec freezes what was
// checked), re-encoded from what was understood.
func TestCredentialConfigMapInjected(t *testing.T) {
	for _, ann := range []string{contract.AnnotationCredentialConfigMap, incumbentPrefix + "workload-identity-credential-configmap"} {
		pod := newPod(annotate(ann, "wif"), func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{gcsVolume("data", nil)} })
		resp, out := mustAdmit(t, credMutator(t, false), pod)
		if len(resp.Warnings) > 0 {
			t.Errorf("%s: warnings %q", ann, resp.Warnings)
		}
		sc, _ := sidecarOf(t, out)
		env := map[string]string{}
		for _, e := range sc.Env {
			env[e.Name] = e.Value
		}
		conf, err := credentials.ParseCredentialConfig("env", []byte(env[contract.EnvCredentialConfig]), credentials.CredentialRules{})
		if err != nil || conf.Audience != "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1" ||
			strings.Contains(env[contract.EnvCredentialConfig], "comment") || env[contract.EnvCredentialConfigMap] != "wif" {
			t.Errorf("%s: sidecar env %v (%v)", ann, env, err)
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, vm := range sc.VolumeMounts {
			mounts[vm.Name] = vm
		}
		if m := mounts[contract.CredentialTokenVolumeName]; m.MountPath != "/var/run/service-account" || !m.ReadOnly {
			t.Errorf("%s: token mount %+v", ann, m)
		}
		vols := map[string]corev1.Volume{}
		for _, v := range out.Spec.Volumes {
			vols[v.Name] = v
			if v.ConfigMap != nil {
				t.Errorf("%s: a ConfigMap volume %s: the sidecar must not read the ConfigMap live", ann, v.Name)
			}
		}
		tok := vols[contract.CredentialTokenVolumeName].Projected
		if tok == nil || len(tok.Sources) != 1 || tok.Sources[0].ServiceAccountToken == nil ||
			tok.Sources[0].ServiceAccountToken.Audience != "https://iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1" ||
			tok.Sources[0].ServiceAccountToken.Path != "token" || *tok.Sources[0].ServiceAccountToken.ExpirationSeconds != 3600 {
			t.Errorf("%s: token volume %+v", ann, vols[contract.CredentialTokenVolumeName])
		}
		for _, c := range append(slices.Clone(out.Spec.Containers), out.Spec.InitContainers...) {
			if c.Name == contract.SidecarContainerName {
				continue
			}
			for _, vm := range c.VolumeMounts {
				if vm.Name == contract.CredentialTokenVolumeName {
					t.Errorf("%s: container %s mounts the token", ann, c.Name)
				}
			}
		}
	}
}

// A pod whose volumes all have an identity of their own does not use the ConfigMap: a
// warning says so and nothing is added (nor read); a hostNetwork pod asking for its own
// account reads as it through the ConfigMap, so it is not refused.
func TestCredentialConfigMapUnusedAndHostNetwork(t *testing.T) {
	own := gcsVolume("data", map[string]string{contract.AttrWorkloadIdentityProvider: "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p-1/providers/r-1"})
	pod := newPod(annotate(contract.AnnotationCredentialConfigMap, "broken"), func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{own} })
	resp, out := mustAdmit(t, credMutator(t, false), pod)
	if !containsSubstring(resp.Warnings, "is not used") {
		t.Errorf("warnings %q, want one saying the ConfigMap is not used", resp.Warnings)
	}
	for _, v := range out.Spec.Volumes {
		if v.Name == contract.CredentialTokenVolumeName {
			t.Error("the token volume was added for a ConfigMap nobody uses")
		}
	}
	hostNet := newPod(annotate(contract.AnnotationCredentialConfigMap, "wif"), func(p *corev1.Pod) {
		p.Spec.HostNetwork = true
		p.Spec.Volumes = []corev1.Volume{gcsVolume("data", map[string]string{"hostNetworkPodKSA": "true"})}
	})
	mustAdmit(t, credMutator(t, false), hostNet)
}

// One read per namespace and name for a burst of admissions, shared by concurrent ones;
// a read again once the cache's entry is old.
func TestKubeConfigMapsCache(t *testing.T) {
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "wif", Namespace: "ns"}, Data: map[string]string{"a": "b"}})
	gets := 0
	cs.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	k := NewKubeConfigMaps(cs)
	now := time.Unix(1000, 0)
	k.now = func() time.Time { return now }
	for range 50 {
		if cm, err := k.ConfigMap(context.Background(), "ns", "wif"); err != nil || cm.Data["a"] != "b" {
			t.Fatalf("%v %v", cm, err)
		}
	}
	if _, err := k.ConfigMap(context.Background(), "ns", "nosuch"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing: %v", err)
	}
	if gets != 2 {
		t.Errorf("%d GETs for 50 admissions of one ConfigMap and one of a missing one, want 2", gets)
	}
	// A missing one is not remembered: made now, it is read at the next admission.
	if _, err := k.ConfigMap(context.Background(), "ns", "nosuch"); !apierrors.IsNotFound(err) || gets != 3 {
		t.Fatalf("missing again: %v, %d GETs, want 3", err, gets)
	}
	gets = 2
	now = now.Add(configMapCacheTTL)
	if _, err := k.ConfigMap(context.Background(), "ns", "wif"); err != nil || gets != 3 {
		t.Errorf("after the TTL: %v, %d GETs, want 3", err, gets)
	}
}

// Where the ConfigMap cannot be honoured, or read, the pod is refused, saying why: admitted,
// it would read as someone else than it asked.
func TestCredentialConfigMapRefused(t *testing.T) {
	shared := gcsVolume("data", map[string]string{contract.AttrMountMode: contract.MountModeShared, contract.AttrWorkloadIdentityProvider: "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p-1/providers/r-1"})
	for _, tc := range []struct {
		name      string
		configMap string
		federated bool
		vols      []corev1.Volume
		code      int32
		want      string
	}{
		{"missing", "nosuch", false, nil, 400, "ConfigMap nosuch not found in namespace ns"},
		{"unreadable", "broken", false, nil, 500, "the API server is unavailable"},
		{"two entries", "two", false, nil, 400, "exactly one data entry"},
		{"not a name", "Wif_1", false, nil, 400, "not a ConfigMap name"},
		{"the node federates", "wif", true, nil, 400, "the node plugin federates every volume"},
		{"a shared volume", "wif", false, []corev1.Volume{gcsVolume("own", nil), shared}, 400, "does not read the pod's credential ConfigMap"},
		{"a volume of the webhook's name", "wif", false, []corev1.Volume{gcsVolume("data", nil), {Name: contract.CredentialTokenVolumeName}}, 400, "already has a volume named gcsfuse-wif-token"},
		{"another STS", "evil", false, nil, 400, "only https://sts.googleapis.com/v1/token"},
	} {
		vols := tc.vols
		if vols == nil {
			vols = []corev1.Volume{gcsVolume("data", nil)}
		}
		pod := newPod(annotate(contract.AnnotationCredentialConfigMap, tc.configMap), func(p *corev1.Pod) { p.Spec.Volumes = vols })
		resp, _ := admit(t, credMutator(t, tc.federated), pod)
		if resp.Allowed || resp.Result == nil || resp.Result.Code != tc.code || !strings.Contains(resp.Result.Message, tc.want) {
			t.Errorf("%s: allowed %v, result %+v; want %d saying %q", tc.name, resp.Allowed, resp.Result, tc.code, tc.want)
		}
	}
}

// A pod with the annotation and none of our volumes (the GKE add-on's, mid-migration) is
// left alone: its ConfigMap is not read.
func TestCredentialConfigMapAddOnPod(t *testing.T) {
	pod := newPod(func(p *corev1.Pod) {
		delete(p.Annotations, contract.AnnotationInject)
		p.Annotations[incumbentPrefix+"volumes"] = "true"
		p.Annotations[incumbentPrefix+"workload-identity-credential-configmap"] = "broken"
		p.Spec.Containers[0].VolumeMounts = nil
		p.Spec.Volumes = []corev1.Volume{{Name: "theirs", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.IncumbentDriverName}}}}
	})
	resp, _ := mustAdmit(t, credMutator(t, false), pod)
	if len(resp.Patch) > 0 {
		t.Errorf("the add-on's pod changed: patch %s", resp.Patch)
	}
}

// Admissions asking at once share one read; one whose context ends first gets its error and
// leaves the others theirs.
func TestKubeConfigMapsConcurrent(t *testing.T) {
	cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "wif", Namespace: "ns"}, Data: map[string]string{"a": "b"}})
	var gets atomic.Int32
	release := make(chan struct{})
	cs.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		<-release
		return false, nil, nil
	})
	k := NewKubeConfigMaps(cs)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if i%10 == 0 {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			cm, err := k.ConfigMap(ctx, "ns", "wif")
			switch {
			case i%10 == 0 && !errors.Is(err, context.Canceled):
				errs <- fmt.Errorf("a cancelled admission got %v", err)
			case i%10 != 0 && (err != nil || cm.Data["a"] != "b"):
				errs <- fmt.Errorf("an admission got %v, %v", cm, err)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("%d GETs for 100 admissions at once, want 1", n)
	}
}

// A pod lending the sidecar's image (which may not know the configuration) is refused with
// the annotation.
func TestCredentialConfigMapLentImage(t *testing.T) {
	pod := newPod(annotate(contract.AnnotationCredentialConfigMap, "wif"), func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: contract.SidecarContainerName, Image: "registry.example.com/old/sidecar:0.1.0"})
	})
	resp, _ := admit(t, credMutator(t, false), pod)
	if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "lends the sidecar's image") {
		t.Errorf("allowed %v, result %+v; want a refusal naming the lent image", resp.Allowed, resp.Result)
	}
}
