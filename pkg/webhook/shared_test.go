package webhook

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
)

// shared and sidecarMode are the volume attributes of each mount mode.
var (
	shared      = map[string]string{contract.AttrMountMode: contract.MountModeShared}
	sidecarMode = map[string]string{contract.AttrMountMode: contract.MountModeSidecar}
)

// withAttrs is attrs with more key-value pairs.
func withAttrs(attrs map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range attrs {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// podWith is newPod with these volumes, all mounted by the app container, and the opt-in
// annotation's value annotation ("": absent).
func podWith(annotation string, vols ...corev1.Volume) *corev1.Pod {
	return newPod(func(p *corev1.Pod) {
		delete(p.Annotations, contract.AnnotationInject)
		if annotation != "" {
			p.Annotations[contract.AnnotationInject] = annotation
		}
		p.Spec.Volumes = vols
		p.Spec.Containers[0].VolumeMounts = nil
		for _, v := range vols {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/" + v.Name})
		}
	})
}

// assertNotInjected checks that the pod was admitted without a patch (no sidecar, no
// emptyDir, no annotation), with a warning containing each of wantWarnings, or none.
func assertNotInjected(t *testing.T, m *Mutator, pod *corev1.Pod, wantWarnings ...string) {
	t.Helper()
	resp, out := mustAdmit(t, m, pod)
	if resp.Patch != nil || resp.PatchType != nil {
		t.Fatalf("patched a pod whose volumes the node's shared mounter serves: %s", resp.Patch)
	}
	if hasVolume(out, contract.TmpVolumeName) || out.Annotations[contract.AnnotationInjected] != "" {
		t.Fatalf("the pod was changed: volumes %v, annotations %v", out.Spec.Volumes, out.Annotations)
	}
	for _, w := range wantWarnings {
		if !containsSubstring(resp.Warnings, w) {
			t.Errorf("warnings = %q, want one with %q", resp.Warnings, w)
		}
	}
	if len(wantWarnings) == 0 && len(resp.Warnings) > 0 {
		t.Errorf("unexpected warnings %q", resp.Warnings)
	}
}

// assertInjected checks that the pod got the native sidecar and its tmp emptyDir, and
// returns the patched pod.
func assertInjected(t *testing.T, m *Mutator, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	resp, out := mustAdmit(t, m, pod)
	if resp.Patch == nil {
		t.Fatalf("not injected (warnings %q)", resp.Warnings)
	}
	if _, isInit := sidecarOf(t, out); !isInit || !hasVolume(out, contract.TmpVolumeName) || out.Annotations[contract.AnnotationInjected] != contract.ModeNative {
		t.Fatalf("want the native sidecar with its %s volume; init %v volumes %v", contract.TmpVolumeName, names(out.Spec.InitContainers), out.Spec.Volumes)
	}
	return out
}

// A pod whose inline volumes of the driver all have mountMode: shared gets nothing: the
// node's shared mounter serves them. With the opt-in annotation it still gets nothing, and
// a warning says the annotation (and any other of ours) is ignored. A pod with one volume
// of the sidecar's (mountMode absent or "sidecar") beside shared ones gets the sidecar.
func TestSharedInlineVolumes(t *testing.T) {
	m := newMutator(t, modern)
	const ignored = `annotation gcsfuse.csi.storage/volumes: "true" is ignored: the node's shared mounter serves the pod's gcsfuse volumes (mountMode: shared on a, b)`

	assertNotInjected(t, m, podWith("", gcsVolume("a", shared)))
	assertNotInjected(t, m, podWith("", gcsVolume("a", shared), gcsVolume("b", shared)))
	assertNotInjected(t, m, podWith("true", gcsVolume("a", shared), gcsVolume("b", shared)), ignored)
	withResources := podWith("true", gcsVolume("a", shared), gcsVolume("b", shared))
	withResources.Annotations[contract.AnnotationMemoryLimit] = "lots" // not even read
	assertNotInjected(t, m, withResources, ignored, "annotations gcsfuse.csi.storage/memory-limit are ignored: the node's shared mounter")
	// Opted out: nothing to warn about, the node serves the volume.
	assertNotInjected(t, m, podWith("false", gcsVolume("a", shared)))
	// Opted out with a volume of the sidecar's: the warning names that one only.
	resp, _ := mustAdmit(t, m, podWith("false", gcsVolume("a", shared), gcsVolume("b", nil)))
	if !containsSubstring(resp.Warnings, "the pod mounts gcsfuse.csi.storage volume b but opts out") {
		t.Errorf("warnings = %q, want the opt-out warning naming b only", resp.Warnings)
	}

	for _, annotation := range []string{"", "true"} {
		assertInjected(t, m, podWith(annotation, gcsVolume("a", shared), gcsVolume("b", nil)))
		assertInjected(t, m, podWith(annotation, gcsVolume("a", shared), gcsVolume("b", sidecarMode)))
		assertInjected(t, m, podWith(annotation, gcsVolume("a", sidecarMode)))
	}
	// Another driver's volume saying shared is not ours to read.
	other := gcsVolume("a", nil)
	other.CSI.Driver = "other.csi.example"
	other.CSI.VolumeAttributes = shared
	assertInjected(t, m, podWith("", gcsVolume("b", nil), other))
}

// An inline volume whose mountMode is neither "sidecar" nor "shared" is refused at
// admission with mountopts.MountMode's error, naming the volume, the attribute and the
// accepted values, as every other bad inline attribute is (checkInlineVolumes), beside a
// shared volume too; a shared inline volume's other attributes are checked as well.
func TestSharedInvalidInlineMountMode(t *testing.T) {
	m := newMutator(t, modern)
	for _, v := range []string{"Shared", "node", " shared"} {
		for _, annotation := range []string{"", "true"} {
			bad := gcsVolume("data", map[string]string{contract.AttrMountMode: v})
			for _, pod := range []*corev1.Pod{podWith(annotation, bad), podWith(annotation, gcsVolume("a", shared), bad)} {
				resp, _ := admit(t, m, pod)
				assertDenied(t, resp, "volume data:", `mountMode "`+v+`"`, `"sidecar"`, `"shared"`)
			}
		}
	}
	// A shared inline volume's other attributes are checked as the sidecar's are.
	resp, _ := admit(t, m, podWith("", gcsVolume("data", withAttrs(shared, contract.AttrMountOptions, "no-such-option"))))
	assertDenied(t, resp, "volume data:", `mount option "no-such-option"`)
}

// The sidecar of a pod with shared and sidecar volumes is sized by the sidecar's volumes
// alone: a file cache asked for by a shared volume adds no cache volume, one asked for by a
// sidecar volume does; an init container that mounts only shared volumes is not one the
// sidecar serves (not in contract.EnvInitContainers, and a legacy pod with one is not
// refused as one that would hang).
func TestSharedVolumesDoNotShapeTheSidecar(t *testing.T) {
	m := newMutator(t, modern)
	cached := withAttrs(shared, contract.AttrFileCacheCapacity, "1Gi")
	for _, tt := range []struct {
		name      string
		vols      []corev1.Volume
		wantCache bool
	}{
		{"cache on the shared volume", []corev1.Volume{gcsVolume("a", cached), gcsVolume("b", nil)}, false},
		{"cache in the shared volume's options", []corev1.Volume{
			gcsVolume("a", withAttrs(shared, contract.AttrMountOptions, "file-cache:max-size-mb:100")), gcsVolume("b", nil)}, false},
		{"cache on the sidecar volume", []corev1.Volume{gcsVolume("a", shared), gcsVolume("b", map[string]string{contract.AttrFileCacheCapacity: "1Gi"})}, true},
		{"cache on both", []corev1.Volume{gcsVolume("a", cached), gcsVolume("b", map[string]string{contract.AttrFileCacheCapacity: "1Gi"})}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := assertInjected(t, m, podWith("", tt.vols...))
			c, _ := sidecarOf(t, out)
			mounted := slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.Name == contract.CacheVolumeName })
			if mounted != tt.wantCache || hasVolume(out, contract.CacheVolumeName) != tt.wantCache {
				t.Errorf("cache mounted %v, volume %v; want %v", mounted, hasVolume(out, contract.CacheVolumeName), tt.wantCache)
			}
		})
	}

	pod := podWith("", gcsVolume("a", shared), gcsVolume("b", nil))
	pod.Spec.InitContainers = []corev1.Container{mounting("warmup", "a"), mounting("reader", "b")}
	out := assertInjected(t, m, pod)
	c, _ := sidecarOf(t, out)
	if got := envOf(c)[contract.EnvInitContainers]; got != "reader" {
		t.Errorf("%s = %q, want reader (warmup mounts only the shared volume)", contract.EnvInitContainers, got)
	}
	legacy := newMutator(t, old)
	pod.Spec.InitContainers = []corev1.Container{mounting("warmup", "a")}
	if resp, _ := admit(t, legacy, pod); !resp.Allowed {
		t.Errorf("legacy pod whose init container mounts only a shared volume denied: %s", resp.Result.Message)
	}
	pod.Spec.InitContainers = []corev1.Container{mounting("warmup", "a", "b")}
	resp, _ := admit(t, legacy, pod)
	assertDenied(t, resp, "init container warmup (volume b)", "Pending forever")
}

// sharedCluster has, for each way a claim reaches a volume of the driver, a shared one and
// one with an invalid mountMode: bound claims (PersistentVolumes pv-shared, pv-invalid),
// claims pre-bound by a PersistentVolume's claimRef, and classes (gcs-shared, gcs-invalid)
// for unbound claims and generic ephemeral volumes.
func sharedCluster() []runtime.Object {
	pv := func(name string, attrs map[string]string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: contract.DriverName, VolumeHandle: "bucket", VolumeAttributes: attrs}}}}
	}
	bound := func(name, volume string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume}}
	}
	params := func(mode string) map[string]string {
		return map[string]string{contract.AttrBucketName: "data", classparams.ParamPathPrefix: "claims", contract.AttrMountMode: mode,
			"csi.storage.k8s.io/provisioner-secret-name": "s"}
	}
	return []runtime.Object{
		pv("pv-shared", withAttrs(shared, contract.AttrFileCacheCapacity, "1Gi")),
		pv("pv-invalid", map[string]string{contract.AttrMountMode: "Shared", contract.AttrFileCacheCapacity: "1Gi"}),
		bound("c-pv-shared", "pv-shared"),
		bound("c-pv-invalid", "pv-invalid"),
		unboundClaim("c-pre-shared", "u-pre-shared", ptr("")),
		preboundPV("pv-pre-shared", contract.DriverName, "c-pre-shared", "", shared),
		unboundClaim("c-pre-invalid", "u-pre-invalid", ptr("")),
		preboundPV("pv-pre-invalid", contract.DriverName, "c-pre-invalid", "", map[string]string{contract.AttrMountMode: "node"}),
		storageClass("gcs-shared", contract.DriverName, params(contract.MountModeShared), false, 100),
		storageClass("gcs-invalid", contract.DriverName, params("node"), false, 100),
		pendingClaim("c-class-shared", ptr("gcs-shared")),
		pendingClaim("c-class-invalid", ptr("gcs-invalid")),
		pendingClaim("c-static", ptr("")),
	}
}

// A claim or generic ephemeral volume reads its mount mode where its attributes come from:
// its bound (or claimRef pre-bound) PersistentVolume's, or its StorageClass's parameters.
// All shared: no injection. An invalid mountMode there is the sidecar's (the node plugin
// refuses the mount with the reason): injected, as for any other bad attribute of a
// PersistentVolume or class. With the opt-in annotation and a claim that cannot be
// resolved beside shared ones, the annotation asks for the sidecar: injected.
func TestSharedClaims(t *testing.T) {
	cs := fake.NewClientset(sharedCluster()...)
	cfg := testConfig()
	cfg.Claims = KubeVolumeClaims{Client: cs, Prebound: startPrebound(t, cs)}
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name        string
		pod         *corev1.Pod
		inject      bool
		cache       bool // injected with the cache volume
		wantWarning string
	}{
		{name: "bound to a shared PersistentVolume", pod: podWith("", claimVolume("data", "c-pv-shared"))},
		{name: "pre-bound to a shared PersistentVolume", pod: podWith("", claimVolume("data", "c-pre-shared"))},
		{name: "unbound, of a shared class", pod: podWith("", claimVolume("data", "c-class-shared"))},
		{name: "ephemeral, of a shared class", pod: podWith("", ephemeralVolume("data", ptr("gcs-shared")))},
		{name: "all of them, and an inline one", pod: podWith("", claimVolume("a", "c-pv-shared"), claimVolume("b", "c-pre-shared"),
			claimVolume("c", "c-class-shared"), ephemeralVolume("d", ptr("gcs-shared")), gcsVolume("e", shared))},
		{name: "opted in", pod: podWith("true", claimVolume("a", "c-pv-shared"), ephemeralVolume("b", ptr("gcs-shared"))),
			wantWarning: `annotation gcsfuse.csi.storage/volumes: "true" is ignored: the node's shared mounter serves the pod's gcsfuse volumes (mountMode: shared on a, b)`},
		{name: "bound to a PersistentVolume with an invalid mountMode", pod: podWith("", claimVolume("data", "c-pv-invalid")), inject: true, cache: true},
		{name: "pre-bound to a PersistentVolume with an invalid mountMode", pod: podWith("", claimVolume("data", "c-pre-invalid")), inject: true},
		{name: "unbound, of a class with an invalid mountMode", pod: podWith("", claimVolume("data", "c-class-invalid")), inject: true},
		{name: "ephemeral, of a class with an invalid mountMode", pod: podWith("", ephemeralVolume("data", ptr("gcs-invalid"))), inject: true},
		// pv-shared's file cache is not the sidecar's.
		{name: "shared beside a sidecar claim", pod: podWith("", claimVolume("a", "c-pv-shared"), claimVolume("b", "c-class-invalid")), inject: true},
		{name: "shared beside an unresolved claim", pod: podWith("", claimVolume("a", "c-pv-shared"), claimVolume("b", "c-static")),
			wantWarning: "volume b: claim c-static is not bound to a volume yet"},
		{name: "shared beside an unresolved claim, opted in", pod: podWith("true", claimVolume("a", "c-pv-shared"), claimVolume("b", "c-static")), inject: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.inject {
				if tt.wantWarning != "" {
					assertNotInjected(t, m, tt.pod, tt.wantWarning)
				} else {
					assertNotInjected(t, m, tt.pod)
				}
				return
			}
			if out := assertInjected(t, m, tt.pod); hasVolume(out, contract.CacheVolumeName) != tt.cache {
				t.Errorf("cache volume %v, want %v: volumes %v", hasVolume(out, contract.CacheVolumeName), tt.cache, out.Spec.Volumes)
			}
		})
	}
}

// An injected pod with a shared volume beside the sidecar's, admitted again (re-invocation),
// keeps its sidecar with no patch; a pod that already carries our sidecar though all its
// volumes are shared (a copy of an injected pod) keeps it too, and Review says so. An
// all-shared pod is reviewed as Mutate admits it: no sidecar, its volumes NodeServed.
func TestSharedReinvocationAndReview(t *testing.T) {
	m := newMutator(t, modern)
	injected := assertInjected(t, m, podWith("", gcsVolume("a", shared), gcsVolume("b", nil)))
	if resp, _ := mustAdmit(t, m, injected); resp.Patch != nil {
		t.Errorf("re-invocation patched an injected pod: %s", resp.Patch)
	}

	copied := injected.DeepCopy()
	copied.Spec.Volumes[slices.IndexFunc(copied.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "b" })] = gcsVolume("b", shared)
	if resp, _ := mustAdmit(t, m, copied); resp.Patch != nil {
		t.Errorf("an injected pod whose volumes are all shared was patched: %s", resp.Patch)
	}
	a, err := m.Review(context.Background(), copied, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if a.Sidecar == nil || !a.Existing || a.NodeServed != nil {
		t.Errorf("Review of an injected all-shared pod: %+v, want its sidecar, kept", a)
	}

	pod := podWith("true", gcsVolume("b", shared), gcsVolume("a", shared))
	a, err = m.Review(context.Background(), pod, "ns")
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := mustAdmit(t, m, pod)
	if a.Sidecar != nil || a.Denied != "" || a.Mode != "" || !reflect.DeepEqual(a.NodeServed, []string{"a", "b"}) || !slices.Equal(a.Warnings, resp.Warnings) {
		t.Errorf("Review of an all-shared pod: %+v; Mutate's warnings %q", a, resp.Warnings)
	}
	a, err = m.Review(context.Background(), podWith("", gcsVolume("a", shared), gcsVolume("b", nil)), "ns")
	if err != nil || a.Sidecar == nil || a.NodeServed != nil {
		t.Errorf("Review of a mixed pod: %+v, %v; want the sidecar", a, err)
	}
}

// An inline shared volume that would read with the mounter's Application Default Credentials
// is denied (403) in a namespace not named in SharedADC, saying why and what to do; a key,
// the volume's own provider, a node plugin that federates shared volumes, a named namespace,
// or the sidecar's mode each let it through.
func TestSharedADCRefusedAtAdmission(t *testing.T) {
	const provider = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov"
	withKey := gcsVolume("data", shared)
	withKey.CSI.NodePublishSecretRef = &corev1.LocalObjectReference{Name: "key"}
	mutator := func(adc credentials.SharedADC, federated bool) *Mutator {
		cfg := testConfig()
		cfg.SharedADC, cfg.SharedFederated = adc, federated
		m, err := NewMutator(cfg, fakeVersions{}, discardLogger())
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	notNamed := mutator(credentials.SharedADC{"batch", "team-*"}, false)
	resp, _ := admit(t, notNamed, podWith("", gcsVolume("data", shared)))
	if resp.Allowed || resp.Result == nil || resp.Result.Code != 403 {
		t.Fatalf("shared ADC in namespace ns, not named: %+v; want a 403 denial", resp.Result)
	}
	for _, want := range []string{"volume data", `namespace "ns"`, "mounter.adcNamespaces", "nodePublishSecretRef", "workloadIdentityProvider"} {
		if !strings.Contains(resp.Result.Message, want) {
			t.Errorf("denial lacks %q: %s", want, resp.Result.Message)
		}
	}
	// Beside a volume of the sidecar's, the shared one is still refused.
	if resp, _ := admit(t, notNamed, podWith("", gcsVolume("cache", nil), gcsVolume("data", shared))); resp.Allowed {
		t.Error("a pod with a sidecar volume and a shared ADC volume was admitted")
	}
	for name, tc := range map[string]struct {
		m   *Mutator
		vol corev1.Volume
	}{
		"a key":                   {notNamed, withKey},
		"the volume's provider":   {notNamed, gcsVolume("data", withAttrs(shared, contract.AttrWorkloadIdentityProvider, provider))},
		"a federating node":       {mutator(nil, true), gcsVolume("data", shared)},
		"a named namespace":       {mutator(credentials.SharedADC{"ns"}, false), gcsVolume("data", shared)},
		"a prefix of the name":    {mutator(credentials.SharedADC{"n*"}, false), gcsVolume("data", shared)},
		"every namespace":         {mutator(credentials.SharedADC{"*"}, false), gcsVolume("data", shared)},
		"the sidecar's mode":      {notNamed, gcsVolume("data", nil)},
		"a bad provider (node's)": {notNamed, gcsVolume("data", withAttrs(shared, contract.AttrWorkloadIdentityProvider, "nope"))},
	} {
		if resp, _ := admit(t, tc.m, podWith("", tc.vol)); !resp.Allowed {
			t.Errorf("%s: denied: %s", name, resp.Result.Message)
		}
	}
}
