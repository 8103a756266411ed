package webhook

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// claimsMap is a VolumeClaims from a table: claim -> driver; a claim mapped to "unbound" is
// not bound, one mapped to "error" fails the lookup; a missing claim does not exist.
type claimsMap map[string]string

func (c claimsMap) ClaimDriver(_ context.Context, _, claim string) (string, bool, error) {
	switch d, ok := c[claim]; {
	case !ok, d == "unbound":
		return "", false, nil
	case d == "error":
		return "", false, errors.New("the API server is unavailable")
	default:
		return d, true, nil
	}
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
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dangling"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "gone"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-gcs"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: contract.DriverName, VolumeHandle: "bucket"}}}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/"}}}},
	)
	k := KubeVolumeClaims{Client: cs}
	for _, tt := range []struct {
		claim, driver string
		bound         bool
	}{
		{"bound", contract.DriverName, true},
		{"nfs", "", true},
		{"pending", "", false},
		{"dangling", "", false},
		{"nosuch", "", false},
	} {
		d, b, err := k.ClaimDriver(context.Background(), "ns", tt.claim)
		if err != nil || d != tt.driver || b != tt.bound {
			t.Errorf("ClaimDriver(%s) = %q, %v, %v; want %q, %v", tt.claim, d, b, err, tt.driver, tt.bound)
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
