package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// A pod written for the GKE driver (its opt-in and resource annotations), its volume moved
// to this driver, gets our sidecar with the resources it asked for; an annotation of its
// without an equivalent is a warning; both spellings that disagree are a denial naming both.
func TestIncumbentAnnotations(t *testing.T) {
	gke := func(kv ...string) *corev1.Pod {
		return newPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				p.Annotations[kv[i]] = kv[i+1]
			}
		})
	}
	t.Run("opt-in and resources", func(t *testing.T) {
		resp, out := mustAdmit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "true", "gke-gcsfuse/memory-limit", "1Gi", "gke-gcsfuse/cpu-request", "500m"))
		c, _ := sidecarOf(t, out)
		if got := c.Resources.Limits[corev1.ResourceMemory]; got.Cmp(resource.MustParse("1Gi")) != 0 {
			t.Errorf("memory limit = %v, want 1Gi", got.String())
		}
		if got := c.Resources.Requests[corev1.ResourceCPU]; got.Cmp(resource.MustParse("500m")) != 0 {
			t.Errorf("cpu request = %v, want 500m", got.String())
		}
		if len(resp.Warnings) > 0 {
			t.Errorf("warnings %q", resp.Warnings)
		}
	})
	t.Run("opt-out", func(t *testing.T) {
		resp, out := mustAdmit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "false"))
		if resp.Patch != nil || out.Annotations[contract.AnnotationInjected] != "" {
			t.Fatalf("injected: %s", resp.Patch)
		}
	})
	t.Run("opt-in in any case, as the GKE webhook reads it", func(t *testing.T) {
		_, out := mustAdmit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "True"))
		if out.Annotations[contract.AnnotationInjected] == "" {
			t.Fatal(`gke-gcsfuse/volumes: "True" not injected`)
		}
		resp, out := mustAdmit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "FALSE"))
		if resp.Patch != nil || out.Annotations[contract.AnnotationInjected] != "" {
			t.Fatalf(`gke-gcsfuse/volumes: "FALSE" injected: %s`, resp.Patch)
		}
		if resp, _ := admit(t, newMutator(t, modern), gke(contract.AnnotationInject, "True")); resp.Allowed {
			t.Fatalf(`%s: "True" (ours takes only "true" and "false") allowed`, contract.AnnotationInject)
		}
	})
	t.Run("no equivalent", func(t *testing.T) {
		resp, _ := mustAdmit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "true", "gke-gcsfuse/metadata-prefetch-memory-limit", "10Mi"))
		if !containsSubstring(resp.Warnings, "gke-gcsfuse/metadata-prefetch-memory-limit") {
			t.Fatalf("warnings = %q, want one naming the annotation without an equivalent", resp.Warnings)
		}
	})
	t.Run("disagreeing spellings", func(t *testing.T) {
		resp, _ := admit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "true", "gke-gcsfuse/memory-limit", "1Gi", contract.AnnotationMemoryLimit, "2Gi"))
		if resp.Allowed || !containsSubstring([]string{resp.Result.Message}, "gke-gcsfuse/memory-limit") || !containsSubstring([]string{resp.Result.Message}, contract.AnnotationMemoryLimit) {
			t.Fatalf("allowed=%v %+v, want a denial naming both annotations", resp.Allowed, resp.Result)
		}
	})
	t.Run("bad value named", func(t *testing.T) {
		resp, _ := admit(t, newMutator(t, modern), gke("gke-gcsfuse/volumes", "yes"))
		if resp.Allowed {
			t.Fatal("a bad opt-in value was allowed")
		}
	})
}

// addOnVolume is an inline volume of the GKE driver (served by the GKE add-on).
func addOnVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: contract.IncumbentDriverName, VolumeAttributes: map[string]string{contract.AttrBucketName: "theirs"}}}}
}

// Side by side with the GKE add-on (a migration in progress): its annotation on a pod whose
// volumes are all its own asks nothing of ours; a pod that uses both drivers gets our
// sidecar once and keeps the add-on's; installed under the GKE driver's name (no add-on
// possible), the annotation is ours again.
func TestSideBySideWithTheAddOn(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	addOnSidecar := corev1.Container{Name: incumbentSidecarName, Image: "gke.gcr.io/gcs-fuse-csi-driver-sidecar-mounter:v1",
		RestartPolicy: &always}
	theirs := func(p *corev1.Pod) {
		p.Annotations = map[string]string{"gke-gcsfuse/volumes": "true"}
		p.Spec.Volumes = []corev1.Volume{addOnVolume("data")}
	}
	t.Run("the add-on's pod", func(t *testing.T) {
		resp, out := mustAdmit(t, newMutator(t, modern), newPod(theirs))
		if resp.Patch != nil || out.Annotations[contract.AnnotationInjected] != "" {
			t.Fatalf("injected into a pod of the add-on's: %s", resp.Patch)
		}
	})
	t.Run("the add-on's pod, its sidecar already injected", func(t *testing.T) {
		resp, _ := mustAdmit(t, newMutator(t, modern), newPod(theirs, func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{addOnSidecar}
		}))
		if resp.Patch != nil {
			t.Fatalf("touched a pod of the add-on's: %s", resp.Patch)
		}
	})
	t.Run("both drivers: each sidecar once", func(t *testing.T) {
		_, out := mustAdmit(t, newMutator(t, modern), newPod(func(p *corev1.Pod) {
			p.Annotations["gke-gcsfuse/volumes"] = "true"
			p.Spec.Volumes = append(p.Spec.Volumes, addOnVolume("old"))
			p.Spec.InitContainers = []corev1.Container{addOnSidecar}
		}))
		var ours, theirs int
		for _, c := range append(append([]corev1.Container{}, out.Spec.InitContainers...), out.Spec.Containers...) {
			switch c.Name {
			case contract.SidecarContainerName:
				ours++
			case incumbentSidecarName:
				theirs++
				if c.Image != addOnSidecar.Image {
					t.Errorf("the add-on's sidecar was changed: %+v", c)
				}
			}
		}
		if ours != 1 || theirs != 1 {
			t.Fatalf("%d of our sidecars and %d of the add-on's, want one each: init=%v containers=%v", ours, theirs,
				names(out.Spec.InitContainers), names(out.Spec.Containers))
		}
	})
	t.Run("installed under the GKE driver's name", func(t *testing.T) {
		cfg := testConfig()
		cfg.DriverName = contract.IncumbentDriverName
		m, err := NewMutator(cfg, modern, discardLogger())
		if err != nil {
			t.Fatal(err)
		}
		_, out := mustAdmit(t, m, newPod(theirs))
		if out.Annotations[contract.AnnotationInjected] == "" {
			t.Fatal("no sidecar for the GKE driver's annotation and volume, with this driver installed under that name")
		}
	})
}
