package webhook

import (
	"context"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Review says what Mutate does, pod by pod: the same denial message, the same warnings,
// the sidecar the patch adds, the container whose image it takes, the GKE driver's
// annotations read as ours; and on a pod that already carries our sidecar (read back from
// a cluster), that sidecar, kept.
func TestReview(t *testing.T) {
	lend := func(name, image string, init bool) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			c := corev1.Container{Name: name, Image: image}
			if init {
				p.Spec.InitContainers = append(p.Spec.InitContainers, c)
			} else {
				p.Spec.Containers = append(p.Spec.Containers, c)
			}
		}
	}
	for _, tt := range []struct {
		name    string
		pod     *corev1.Pod
		lentBy  string
		aliases map[string]string
	}{
		{"injected", newPod(), "", map[string]string{}},
		{"GKE annotations", newPod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{"gke-gcsfuse/volumes": "true", "gke-gcsfuse/memory-limit": "1Gi", "gke-gcsfuse/enable-numa-pinning": "true"}
		}), "", map[string]string{"gke-gcsfuse/volumes": contract.AnnotationInject, "gke-gcsfuse/memory-limit": contract.AnnotationMemoryLimit}},
		{"lent by an init container", newPod(lend(contract.SidecarContainerName, "example.com/sidecar:2", true)), contract.SidecarContainerName, map[string]string{}},
		{"lent by the GKE driver's container", newPod(lend(contract.IncumbentSidecarContainerName, "example.com/sidecar:3", false)),
			contract.IncumbentSidecarContainerName, map[string]string{}},
		{"denied", newPod(annotate(contract.AnnotationMemoryLimit, "lots")), "", nil},
		{"opted out", newPod(annotate(contract.AnnotationInject, "false")), "", map[string]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMutator(t, modern)
			before := tt.pod.DeepCopy()
			a, err := m.Review(context.Background(), tt.pod, "ns")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tt.pod, before) {
				t.Error("Review modified the pod")
			}
			resp, out := admit(t, m, tt.pod)
			if !resp.Allowed {
				if a.Denied != resp.Result.Message {
					t.Fatalf("Review denies with %q, Mutate with %q", a.Denied, resp.Result.Message)
				}
				return
			}
			if a.Denied != "" || !slices.Equal(a.Warnings, resp.Warnings) {
				t.Errorf("Review: denied %q warnings %q; Mutate: warnings %q", a.Denied, a.Warnings, resp.Warnings)
			}
			if resp.Patch == nil {
				if a.Sidecar != nil {
					t.Fatalf("Review injects %s, Mutate nothing", a.Sidecar.Name)
				}
				return
			}
			want, _ := sidecarOf(t, out)
			if a.Sidecar == nil || !reflect.DeepEqual(*a.Sidecar, want) || a.Mode != contract.ModeNative || a.Existing {
				t.Fatalf("Review's sidecar %+v (mode %s, existing %v), Mutate's %+v", a.Sidecar, a.Mode, a.Existing, want)
			}
			if a.LentBy != tt.lentBy || !reflect.DeepEqual(a.Aliases, tt.aliases) {
				t.Errorf("lent by %q aliases %v, want %q %v", a.LentBy, a.Aliases, tt.lentBy, tt.aliases)
			}
			// The injected pod, reviewed again (read back from a cluster): its sidecar, kept.
			again, err := m.Review(context.Background(), out, "ns")
			if err != nil {
				t.Fatal(err)
			}
			if again.Sidecar == nil || !again.Existing || again.Sidecar.Image != want.Image || again.Mode != contract.ModeNative {
				t.Errorf("reviewed again: %+v, want the existing sidecar", again)
			}
		})
	}
}
