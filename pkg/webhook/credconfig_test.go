package webhook

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
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
  "credential_source": {"file": "/var/run/service-account/token"}}`

func credMutator(t *testing.T, federated bool) *Mutator {
	t.Helper()
	cfg := testConfig()
	cfg.ConfigMaps = configMaps{"ns/wif": {"credential-configuration.json": wifConfig}, "ns/two": {"a": wifConfig, "b": wifConfig}}
	cfg.NodeFederated = federated
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A pod naming its credential ConfigMap (ours or the GKE driver's annotation) gets its
// token projected for the provider's default audience where the configuration reads it,
// the configuration itself, both read-only in the sidecar alone, and the sidecar told
// where the configuration is.
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
		if env[contract.EnvCredentialConfig] != "/etc/gcsfuse-csi/wif/credential-configuration.json" || env[contract.EnvCredentialConfigMap] != "wif" {
			t.Errorf("%s: sidecar env %v", ann, env)
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, vm := range sc.VolumeMounts {
			mounts[vm.Name] = vm
		}
		if m := mounts[contract.CredentialTokenVolumeName]; m.MountPath != "/var/run/service-account" || !m.ReadOnly {
			t.Errorf("%s: token mount %+v", ann, m)
		}
		if m := mounts[contract.CredentialConfigVolumeName]; m.MountPath != contract.CredentialConfigMountPath || !m.ReadOnly {
			t.Errorf("%s: config mount %+v", ann, m)
		}
		vols := map[string]corev1.Volume{}
		for _, v := range out.Spec.Volumes {
			vols[v.Name] = v
		}
		tok := vols[contract.CredentialTokenVolumeName].Projected
		if tok == nil || len(tok.Sources) != 1 || tok.Sources[0].ServiceAccountToken == nil ||
			tok.Sources[0].ServiceAccountToken.Audience != "https://iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1" ||
			tok.Sources[0].ServiceAccountToken.Path != "token" || *tok.Sources[0].ServiceAccountToken.ExpirationSeconds != 3600 {
			t.Errorf("%s: token volume %+v", ann, vols[contract.CredentialTokenVolumeName])
		}
		if cm := vols[contract.CredentialConfigVolumeName].ConfigMap; cm == nil || cm.Name != "wif" || len(cm.Items) != 1 || cm.Items[0].Key != "credential-configuration.json" {
			t.Errorf("%s: config volume %+v", ann, vols[contract.CredentialConfigVolumeName])
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
