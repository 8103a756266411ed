package webhook

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// claimsMap is a VolumeClaims from a table: claim -> driver; a claim mapped to "unbound" is
// not bound (of the default class, and there is none), one mapped to "error" fails the
// lookup; a missing claim does not exist.
type claimsMap map[string]string

func (c claimsMap) ClaimVolume(_ context.Context, _, claim string) (ClaimedVolume, error) {
	switch d, ok := c[claim]; {
	case !ok:
		return ClaimedVolume{}, nil
	case d == "unbound":
		return ClaimedVolume{Pending: true}, nil
	case d == "error":
		return ClaimedVolume{}, errors.New("the API server is unavailable")
	default:
		return ClaimedVolume{Bound: true, Driver: d}, nil
	}
}

// ClassVolume implements VolumeClaims: there is no StorageClass.
func (c claimsMap) ClassVolume(context.Context, *string) (ClassedVolume, error) {
	return ClassedVolume{}, nil
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

// A pod that uses the driver gets the sidecar without the annotation (it cannot work
// without one); a claim that cannot be resolved is admitted unchanged with a warning that
// says what will happen and what to do.
func TestInjectedWithoutAnnotation(t *testing.T) {
	claims := claimsMap{"ours": contract.DriverName, "theirs": "ebs.csi.aws.com", "pending": "unbound", "broken": "error"}
	noAnnotation := func(vols ...corev1.Volume) *corev1.Pod {
		return newPod(func(p *corev1.Pod) {
			delete(p.Annotations, contract.AnnotationInject)
			p.Spec.Volumes = vols
		})
	}
	for _, tt := range []struct {
		name        string
		pod         *corev1.Pod
		inject      bool
		wantWarning string
	}{
		{name: "inline volume", pod: noAnnotation(gcsVolume("data", nil)), inject: true},
		{name: "claim bound to the driver", pod: noAnnotation(claimVolume("data", "ours")), inject: true},
		{name: "claim of another driver", pod: noAnnotation(claimVolume("data", "theirs"))},
		{name: "claim that does not exist", pod: noAnnotation(claimVolume("data", "nosuch")), wantWarning: "not bound"},
		{name: "unbound claim", pod: noAnnotation(claimVolume("data", "pending")), wantWarning: "claim pending is not bound"},
		{name: "lookup fails", pod: noAnnotation(claimVolume("data", "broken")), wantWarning: "the API server is unavailable"},
		{name: "ours among others", pod: noAnnotation(claimVolume("a", "theirs"), claimVolume("data", "ours")), inject: true},
		{name: "opted out", pod: newPod(annotate(contract.AnnotationInject, "false"), func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{claimVolume("data", "ours")} }),
			wantWarning: "opts out"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Claims = claims
			m, err := NewMutator(cfg, modern, discardLogger())
			if err != nil {
				t.Fatal(err)
			}
			resp, out := mustAdmit(t, m, tt.pod)
			injected := out.Annotations[contract.AnnotationInjected] != ""
			if injected != tt.inject {
				t.Fatalf("injected = %v, want %v (patch %s)", injected, tt.inject, resp.Patch)
			}
			if injected {
				if c, isInit := sidecarOf(t, out); c.Name != contract.SidecarContainerName || !isInit {
					t.Fatalf("sidecar %q init=%v, want the native sidecar", c.Name, isInit)
				}
			}
			if tt.wantWarning != "" && !containsSubstring(resp.Warnings, tt.wantWarning) {
				t.Fatalf("warnings = %q, want one with %q", resp.Warnings, tt.wantWarning)
			}
			if tt.wantWarning == "" && len(resp.Warnings) > 0 {
				t.Fatalf("unexpected warnings %q", resp.Warnings)
			}
		})
	}
}

// Without a VolumeClaims only inline volumes are seen: a claim is not looked up.
func TestClaimsNotLookedUpWithoutVolumeClaims(t *testing.T) {
	pod := newPod(func(p *corev1.Pod) {
		delete(p.Annotations, contract.AnnotationInject)
		p.Spec.Volumes = []corev1.Volume{claimVolume("data", "ours")}
	})
	resp, out := mustAdmit(t, newMutator(t, modern), pod)
	if out.Annotations[contract.AnnotationInjected] != "" || resp.Patch != nil {
		t.Fatalf("injected without claim lookups: %s", resp.Patch)
	}
}

func TestKubeVolumeClaims(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bound"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-gcs"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "nfs"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-nfs"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending-gcs"}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr("gcs")}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dangling"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "gone"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-gcs"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: contract.DriverName, VolumeHandle: "bucket",
				VolumeAttributes: map[string]string{contract.AttrFileCacheCapacity: "1Gi"}}}}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/"}}}},
	)
	k := KubeVolumeClaims{Client: cs}
	for _, tt := range []struct {
		claim string
		want  ClaimedVolume
	}{
		{"bound", ClaimedVolume{Bound: true, Driver: contract.DriverName, Attributes: map[string]string{contract.AttrFileCacheCapacity: "1Gi"}}},
		{"nfs", ClaimedVolume{Bound: true}},
		{"pending", ClaimedVolume{Pending: true, MaybeStale: true}},
		{"pending-gcs", ClaimedVolume{Pending: true, StorageClassName: ptr("gcs"), MaybeStale: true}},
		{"dangling", ClaimedVolume{}},
		{"nosuch", ClaimedVolume{}},
	} {
		got, err := k.ClaimVolume(context.Background(), "ns", tt.claim)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ClaimVolume(%s) = %+v, %v; want %+v", tt.claim, got, err, tt.want)
		}
	}
}

// Installed under the GKE driver's name (--driver-name), the webhook recognises that
// driver's inline volumes and PersistentVolumes as its own, with or without the annotation,
// and no longer this project's default name.
func TestInstalledUnderTheIncumbentName(t *testing.T) {
	gke := contract.IncumbentDriverName
	gkeVolume := func(name string, attrs map[string]string) corev1.Volume {
		v := gcsVolume(name, attrs)
		v.CSI.Driver = gke
		return v
	}
	noAnnotation := func(vols ...corev1.Volume) *corev1.Pod {
		return newPod(func(p *corev1.Pod) {
			delete(p.Annotations, contract.AnnotationInject)
			p.Spec.Volumes = vols
		})
	}
	cfg := testConfig()
	cfg.DriverName = gke
	cfg.Claims = claimsMap{"gke": gke, "default": contract.DriverName}
	m, err := NewMutator(cfg, modern, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		pod    *corev1.Pod
		inject bool
	}{
		{"inline volume of the GKE driver", noAnnotation(gkeVolume("data", nil)), true},
		{"claim bound to a GKE driver volume", noAnnotation(claimVolume("data", "gke")), true},
		{"inline volume of the default name", noAnnotation(gcsVolume("data", nil)), false},
		{"claim bound to the default name", noAnnotation(claimVolume("data", "default")), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, out := mustAdmit(t, m, tt.pod)
			if injected := out.Annotations[contract.AnnotationInjected] != ""; injected != tt.inject {
				t.Fatalf("injected = %v, want %v (patch %s)", injected, tt.inject, resp.Patch)
			}
		})
	}
	// What depends on recognising the volumes follows the name too: the file cache volume.
	_, out := mustAdmit(t, m, newPod(func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{gkeVolume("data", map[string]string{contract.AttrFileCacheCapacity: "1Gi"})}
	}))
	if !hasVolume(out, contract.CacheVolumeName) {
		t.Errorf("a GKE-driver volume with a file cache got no %s volume", contract.CacheVolumeName)
	}

	cfg.DriverName = "efs.csi.aws.com"
	if _, err := NewMutator(cfg, modern, discardLogger()); err == nil {
		t.Error("a driver name outside the allowlist was accepted")
	}
}

func hasVolume(p *corev1.Pod, name string) bool {
	for _, v := range p.Spec.Volumes {
		if v.Name == name {
			return true
		}
	}
	return false
}

// countingClaims is a VolumeClaims from a table of resolved claims that counts its lookups;
// a claim absent from the table is not bound.
type countingClaims struct {
	table      map[string]ClaimedVolume
	calls      map[string]int
	classCalls int
}

func newCountingClaims(table map[string]ClaimedVolume) *countingClaims {
	return &countingClaims{table: table, calls: map[string]int{}}
}

func (c *countingClaims) ClaimVolume(_ context.Context, _, claim string) (ClaimedVolume, error) {
	c.calls[claim]++
	return c.table[claim], nil
}

// ClassVolume implements VolumeClaims: there is no StorageClass.
func (c *countingClaims) ClassVolume(context.Context, *string) (ClassedVolume, error) {
	c.classCalls++
	return ClassedVolume{}, nil
}

func ourClaim(attrs map[string]string) ClaimedVolume {
	return ClaimedVolume{Bound: true, Driver: contract.DriverName, Attributes: attrs}
}

// claimPod is a pod whose only volume of the driver is "data", through claim "gcs-pvc";
// annotation is the opt-in annotation's value ("": absent).
func claimPod(annotation string, init ...corev1.Container) *corev1.Pod {
	return newPod(func(p *corev1.Pod) {
		delete(p.Annotations, contract.AnnotationInject)
		if annotation != "" {
			p.Annotations[contract.AnnotationInject] = annotation
		}
		p.Spec.Volumes = []corev1.Volume{claimVolume("data", "gcs-pvc")}
		p.Spec.InitContainers = init
	})
}

func mounting(name string, vols ...string) corev1.Container {
	c := corev1.Container{Name: name, Image: "busybox"}
	for _, v := range vols {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/" + v})
	}
	return c
}

func claimMutator(t *testing.T, cv ClusterVersions, claims VolumeClaims) *Mutator {
	t.Helper()
	cfg := testConfig()
	cfg.Claims = claims
	m, err := NewMutator(cfg, cv, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A claim bound to one of the driver's PersistentVolumes is a volume like an inline one: an
// init container mounting it gets the native sidecar before it and is listed in
// contract.EnvInitContainers (also after a re-invocation), a legacy pod with such an init
// container is refused, and the claim is looked up once per admission, with or without
// the opt-in annotation.
func TestClaimInitContainers(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	istio := mounting(istioProxyName)
	istio.RestartPolicy = &always
	for _, annotation := range []string{"", "true"} {
		t.Run("annotation="+annotation, func(t *testing.T) {
			claims := newCountingClaims(map[string]ClaimedVolume{"gcs-pvc": ourClaim(nil)})
			// istio-proxy comes after the reader: the sidecar must not follow it past the
			// reader, which needs the mount from its start.
			pod := claimPod(annotation, mounting("warmup", "data"), istio)
			_, out := mustAdmit(t, claimMutator(t, modern, claims), pod)
			if got, want := names(out.Spec.InitContainers), []string{contract.SidecarContainerName, "warmup", istioProxyName}; !reflect.DeepEqual(got, want) {
				t.Fatalf("init containers = %v, want %v", got, want)
			}
			c, _ := sidecarOf(t, out)
			if got := envOf(c)[contract.EnvInitContainers]; got != "warmup" {
				t.Errorf("%s = %q, want warmup", contract.EnvInitContainers, got)
			}
			if claims.calls["gcs-pvc"] != 1 {
				t.Errorf("claim looked up %d times in one admission, want 1", claims.calls["gcs-pvc"])
			}

			// A later webhook adds another reader of the claim: the re-invocation lists it.
			out.Spec.InitContainers = append(out.Spec.InitContainers, mounting("late", "data"))
			resp, again := mustAdmit(t, claimMutator(t, modern, claims), out)
			if resp.Patch == nil {
				t.Fatal("the re-invocation did not update the sidecar")
			}
			c, _ = sidecarOf(t, again)
			if got := envOf(c)[contract.EnvInitContainers]; got != "warmup,late" {
				t.Errorf("after re-invocation %s = %q, want warmup,late", contract.EnvInitContainers, got)
			}

			resp, _ = admit(t, claimMutator(t, old, claims), claimPod(annotation, mounting("warmup", "data")))
			assertDenied(t, resp, "init container warmup (volume data)", "Pending forever")
			resp, _ = admit(t, claimMutator(t, modern, claims), claimPod(annotation, mounting("warmup", "data")))
			if !resp.Allowed {
				t.Fatalf("native pod denied: %s", resp.Result.Message)
			}
		})
	}
}

// The native sidecar goes before the first init container that mounts the volume, even
// when a native istio-proxy comes between that one and a later reader: the first reader
// needs the mount from its start, so the sidecar does not follow the proxy past it.
func TestNativeSidecarBeforeTheFirstReader(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	istio := mounting(istioProxyName)
	istio.RestartPolicy = &always
	claims := newCountingClaims(map[string]ClaimedVolume{"gcs-pvc": ourClaim(nil)})
	_, out := mustAdmit(t, claimMutator(t, modern, claims), claimPod("", mounting("warmup", "data"), istio, mounting("late", "data")))
	if got, want := names(out.Spec.InitContainers), []string{contract.SidecarContainerName, "warmup", istioProxyName, "late"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("init containers = %v, want %v", got, want)
	}
}

// A claim whose PersistentVolume asks for a file cache (its volumeAttributes, like an inline
// volume's, or its spec.mountOptions) gets the gcsfuse-cache emptyDir mounted into the
// sidecar.
func TestClaimFileCache(t *testing.T) {
	for _, tt := range []struct {
		name         string
		attrs        map[string]string
		mountOptions []string // the PersistentVolume's spec.mountOptions
		want         bool
	}{
		{"fileCacheCapacity", map[string]string{contract.AttrFileCacheCapacity: "10Gi"}, nil, true},
		{"mountOptions file-cache", map[string]string{contract.AttrMountOptions: "implicit-dirs,file-cache:max-size-mb:100"}, nil, true},
		// The GKE driver's documented PersistentVolume form: the cache in spec.mountOptions.
		{"spec.mountOptions file-cache", nil, []string{"implicit-dirs", "file-cache:max-size-mb:-1"}, true},
		{"spec.mountOptions flag form", map[string]string{contract.AttrMountOptions: "implicit-dirs"}, []string{"file-cache-max-size-mb=100"}, true},
		{"spec.mountOptions size 0", nil, []string{"file-cache:max-size-mb:0"}, false},
		{"no cache", map[string]string{contract.AttrMountOptions: "implicit-dirs"}, []string{"implicit-dirs"}, false},
		{"no attributes", nil, nil, false},
	} {
		for _, annotation := range []string{"", "true"} {
			t.Run(tt.name+"/annotation="+annotation, func(t *testing.T) {
				cv := ourClaim(tt.attrs)
				cv.MountOptions = tt.mountOptions
				claims := newCountingClaims(map[string]ClaimedVolume{"gcs-pvc": cv})
				_, out := mustAdmit(t, claimMutator(t, modern, claims), claimPod(annotation))
				c, _ := sidecarOf(t, out)
				mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
					return m.Name == contract.CacheVolumeName && m.MountPath == contract.CacheMountPath
				})
				if mounted != tt.want || hasVolume(out, contract.CacheVolumeName) != tt.want {
					t.Errorf("cache mounted %v, volume %v; want %v", mounted, hasVolume(out, contract.CacheVolumeName), tt.want)
				}
				if claims.calls["gcs-pvc"] != 1 {
					t.Errorf("claim looked up %d times, want 1", claims.calls["gcs-pvc"])
				}
			})
		}
	}
	// A claim of another driver asking for a cache is not ours.
	claims := newCountingClaims(map[string]ClaimedVolume{"gcs-pvc": {Bound: true, Driver: "other.csi.example.com",
		Attributes: map[string]string{contract.AttrFileCacheCapacity: "1Gi"}}})
	pod := claimPod("true")
	pod.Spec.Volumes = append(pod.Spec.Volumes, gcsVolume("inline", nil))
	if _, out := mustAdmit(t, claimMutator(t, modern, claims), pod); hasVolume(out, contract.CacheVolumeName) {
		t.Error("another driver's claim asking for a file cache got the cache volume")
	}
}

// An opted-in pod whose init container mounts a claim that is not bound yet is warned: the
// webhook cannot tell whether that container needs the sidecar.
func TestUnresolvedClaimOfAnInitContainer(t *testing.T) {
	claims := newCountingClaims(nil)
	pod := claimPod("true", mounting("warmup", "data"))
	pod.Spec.Volumes = append(pod.Spec.Volumes, gcsVolume("inline", nil))
	resp, _ := mustAdmit(t, claimMutator(t, modern, claims), pod)
	if !containsSubstring(resp.Warnings, "volume data: claim gcs-pvc is not bound to a volume yet") {
		t.Errorf("warnings = %q", resp.Warnings)
	}
	// Mounted by regular containers only: no warning.
	resp, _ = mustAdmit(t, claimMutator(t, modern, claims), claimPod("true"))
	if len(resp.Warnings) > 0 {
		t.Errorf("unexpected warnings %q", resp.Warnings)
	}
}

// A claim named by several volumes of one pod is looked up once, and every one of those
// volumes is resolved as the first: the driver's (sidecar) or unresolved (a warning each).
func TestClaimNamedTwiceLookedUpOnce(t *testing.T) {
	claims := newCountingClaims(map[string]ClaimedVolume{"gcs-pvc": ourClaim(nil)})
	u := driverUsage(context.Background(), claims, contract.DriverName, "ns",
		[]corev1.Volume{claimVolume("a", "gcs-pvc"), claimVolume("b", "gcs-pvc"), claimVolume("c", "gcs-pvc"), claimVolume("d", "missing"), claimVolume("e", "missing")})
	if claims.calls["gcs-pvc"] != 1 || claims.calls["missing"] != 1 {
		t.Errorf("lookups %v, want one per claim", claims.calls)
	}
	if !u.vols.has("a") || !u.vols.has("b") || !u.vols.has("c") || len(u.claims) != 3 {
		t.Errorf("driver volumes %v (claims %v), want a, b and c", u.vols, u.claims)
	}
	if len(u.unresolved) != 2 || u.unresolved[0].volume != "d" || u.unresolved[1].volume != "e" {
		t.Errorf("unresolved %+v, want d and e", u.unresolved)
	}
}

// A pod naming more distinct claims and classes than MaxLookups costs that many look-ups,
// not more, claims and ephemeral volumes' classes together; the others are not looked up,
// said by one warning.
func TestLookupsBounded(t *testing.T) {
	found := map[string]ClaimedVolume{}
	var vols []corev1.Volume
	for i := range MaxLookups / 2 {
		name := fmt.Sprintf("c%03d", i)
		found[name] = ClaimedVolume{Bound: true, Driver: "other.csi.example.com"}
		vols = append(vols, claimVolume("v"+name, name))
	}
	for i := range MaxLookups {
		class := fmt.Sprintf("class-%03d", i)
		vols = append(vols, corev1.Volume{Name: fmt.Sprintf("e%03d", i), VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class}}}}})
	}
	claims := newCountingClaims(found)
	u := driverUsage(context.Background(), claims, contract.DriverName, "ns", vols)
	total := claims.classCalls
	for _, n := range claims.calls {
		total += n
	}
	if total != MaxLookups {
		t.Errorf("%d look-ups, want %d", total, MaxLookups)
	}
	if len(u.skipped) != MaxLookups/2 {
		t.Errorf("%d volumes skipped, want %d", len(u.skipped), MaxLookups/2)
	}
	if w := u.notInjectedWarnings(contract.DriverName); len(w) != 1 || !strings.Contains(w[0], "not looked up") {
		t.Errorf("warnings %q, want one saying what was not looked up", w)
	}
}
