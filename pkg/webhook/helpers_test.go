package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
)

// fakeVersions is a ClusterVersions with fixed answers. nodes maps a node name to its
// kubelet version; MinKubeletVersion follows KubeClusterVersions' rules.
type fakeVersions struct {
	server    string
	nodes     map[string]string
	serverErr error
	nodeErr   error
}

func (f fakeVersions) ServerVersion() (*version.Version, error) {
	if f.serverErr != nil {
		return nil, f.serverErr
	}
	return version.ParseGeneric(f.server)
}

func (f fakeVersions) MinKubeletVersion(pod *corev1.Pod) (*version.Version, string, error) {
	if f.nodeErr != nil {
		return nil, "", f.nodeErr
	}
	if v, ok := f.nodes[pod.Spec.NodeName]; ok && pod.Spec.NodeName != "" {
		parsed, err := version.ParseGeneric(v)
		return parsed, "node " + pod.Spec.NodeName, err
	}
	v, err := lowestVersion(slices.Collect(maps.Values(f.nodes)), version.ParseGeneric)
	return v, anyNode, err
}

// modern is a cluster where native sidecars work everywhere; old one where they do not.
var (
	modern = fakeVersions{server: "v1.30.1", nodes: map[string]string{"n1": "v1.30.1", "n2": "v1.29.4"}}
	old    = fakeVersions{server: "v1.28.9", nodes: map[string]string{"n1": "v1.28.9"}}
)

const defaultImage = "registry.example.com/gcsfuse/sidecar:v1.0.0"

func testConfig() Config {
	return Config{
		SidecarImage: defaultImage,
		Resources: ResourceDefaults{Requests: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("250m"),
			corev1.ResourceMemory:           resource.MustParse("256Mi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("5Gi"),
		}},
		// The namespace of createRequest's pods: shared volumes there may read with ADC
		// (TestSharedADCRefusedAtAdmission is where that is not so).
		SharedADC: credentials.SharedADC{"ns"},
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newMutator(t testing.TB, cv ClusterVersions) *Mutator {
	t.Helper()
	m, err := NewMutator(testConfig(), cv, discardLogger())
	if err != nil {
		t.Fatalf("NewMutator: %v", err)
	}
	return m
}

// newPod is an opted-in pod with one app container reading one gcsfuse volume.
func newPod(mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns",
			Annotations: map[string]string{contract.AnnotationInject: "true"},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "busybox",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{gcsVolume("data", nil)},
		},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func gcsVolume(name string, attrs map[string]string) corev1.Volume {
	a := map[string]string{contract.AttrBucketName: "bucket"}
	for k, v := range attrs {
		a[k] = v
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: contract.DriverName, VolumeAttributes: a,
	}}}
}

func annotate(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func createRequest(t testing.TB, raw []byte) *admissionv1.AdmissionRequest {
	t.Helper()
	return &admissionv1.AdmissionRequest{
		UID:       "uid-1",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: "ns",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

// admitRaw runs the mutator on a raw pod and returns the response and the pod as stored
// after the patch (the input pod when there is no patch).
func admitRaw(t testing.TB, m *Mutator, raw []byte) (*admissionv1.AdmissionResponse, *corev1.Pod) {
	t.Helper()
	resp := m.Mutate(context.Background(), createRequest(t, raw))
	if resp.UID != "uid-1" {
		t.Fatalf("response UID = %q, want uid-1", resp.UID)
	}
	if !resp.Allowed {
		return resp, nil
	}
	out := raw
	if resp.Patch != nil {
		if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch type = %v, want JSONPatch", resp.PatchType)
		}
		patched, err := applyPatch(raw, resp.Patch)
		if err != nil {
			t.Fatalf("applying the patch %s: %v", resp.Patch, err)
		}
		out = patched
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(out, pod); err != nil {
		t.Fatalf("decoding the patched pod: %v", err)
	}
	return resp, pod
}

func applyPatch(raw, patch []byte) ([]byte, error) {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	return p.Apply(raw)
}

func admit(t testing.TB, m *Mutator, pod *corev1.Pod) (*admissionv1.AdmissionResponse, *corev1.Pod) {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return admitRaw(t, m, raw)
}

// mustAdmit admits pod and fails unless it was allowed.
func mustAdmit(t testing.TB, m *Mutator, pod *corev1.Pod) (*admissionv1.AdmissionResponse, *corev1.Pod) {
	t.Helper()
	resp, out := admit(t, m, pod)
	if !resp.Allowed {
		t.Fatalf("pod denied: %+v", resp.Result)
	}
	return resp, out
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// sidecarOf returns the injected sidecar and whether it is an init container.
func sidecarOf(t testing.TB, pod *corev1.Pod) (corev1.Container, bool) {
	t.Helper()
	var found []corev1.Container
	var isInit bool
	for _, c := range pod.Spec.InitContainers {
		if c.Name == contract.SidecarContainerName {
			found, isInit = append(found, c), true
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == contract.SidecarContainerName {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("found %d sidecars, want 1; init=%v containers=%v", len(found), names(pod.Spec.InitContainers), names(pod.Spec.Containers))
	}
	return found[0], isInit
}

func envOf(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func volumeByName(pod *corev1.Pod, name string) (corev1.Volume, int) {
	var v corev1.Volume
	n := 0
	for _, vol := range pod.Spec.Volumes {
		if vol.Name == name {
			v = vol
			n++
		}
	}
	return v, n
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
