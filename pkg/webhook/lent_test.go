package webhook

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestLentImage(t *testing.T) {
	const custom = "gcr.io/my-project/gcsfuse-sidecar:custom@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	placeholder := func(image string) corev1.Container {
		return corev1.Container{
			Name: contract.SidecarContainerName, Image: image,
			Env: []corev1.EnvVar{{Name: "USER_ENV", Value: "x"}},
		}
	}
	// The GKE driver's name for the same placeholder lends its image the same way.
	gke := func(image string) corev1.Container {
		c := placeholder(image)
		c.Name = "gke-gcsfuse-sidecar"
		return c
	}
	app := corev1.Container{Name: "app", Image: "busybox"}
	setup := corev1.Container{Name: "setup", Image: "busybox"}
	sc := contract.SidecarContainerName
	tests := []struct {
		name       string
		cluster    fakeVersions
		init       []corev1.Container
		containers []corev1.Container
		wantInit   []string
		wantCtrs   []string
		wantDeny   []string
	}{
		{
			name: "init placeholder, native", cluster: modern,
			init:       []corev1.Container{setup, placeholder(custom)},
			containers: []corev1.Container{app},
			wantInit:   []string{sc, "setup"},
			wantCtrs:   []string{"app"},
		},
		{
			name: "regular placeholder, legacy", cluster: old,
			containers: []corev1.Container{app, placeholder(custom)},
			wantCtrs:   []string{sc, "app"},
		},
		{
			name: "regular placeholder, native", cluster: modern,
			containers: []corev1.Container{app, placeholder(custom)},
			wantInit:   []string{sc},
			wantCtrs:   []string{"app"},
		},
		{
			name: "only init container is the placeholder, legacy", cluster: old,
			init:       []corev1.Container{placeholder(custom)},
			containers: []corev1.Container{app},
			wantInit:   nil,
			wantCtrs:   []string{sc, "app"},
		},
		{
			name: "only init container is the placeholder, native", cluster: modern,
			init:       []corev1.Container{placeholder(custom)},
			containers: []corev1.Container{app},
			wantInit:   []string{sc},
			wantCtrs:   []string{"app"},
		},
		{
			name: "invalid image", cluster: modern,
			containers: []corev1.Container{app, placeholder("Not An Image!")},
			wantDeny:   []string{sc, `"Not An Image!"`},
		},
		{
			name: "empty image", cluster: modern,
			containers: []corev1.Container{app, placeholder("")},
			wantDeny:   []string{sc, "empty"},
		},
		{
			name: "two placeholders", cluster: modern,
			init:       []corev1.Container{placeholder(custom)},
			containers: []corev1.Container{app, placeholder(custom)},
			wantDeny:   []string{"2 containers named " + sc},
		},
		{
			name: "GKE driver's init placeholder, native", cluster: modern,
			init:       []corev1.Container{setup, gke(custom)},
			containers: []corev1.Container{app},
			wantInit:   []string{sc, "setup"},
			wantCtrs:   []string{"app"},
		},
		{
			name: "GKE driver's init placeholder, legacy", cluster: old,
			init:       []corev1.Container{gke(custom)},
			containers: []corev1.Container{app},
			wantInit:   nil,
			wantCtrs:   []string{sc, "app"},
		},
		{
			name: "GKE driver's regular placeholder, legacy", cluster: old,
			containers: []corev1.Container{app, gke(custom)},
			wantCtrs:   []string{sc, "app"},
		},
		{
			name: "GKE driver's regular placeholder, native", cluster: modern,
			containers: []corev1.Container{app, gke(custom)},
			wantInit:   []string{sc},
			wantCtrs:   []string{"app"},
		},
		{
			name: "GKE driver's placeholder, invalid image", cluster: modern,
			containers: []corev1.Container{app, gke("Not An Image!")},
			wantDeny:   []string{"container gke-gcsfuse-sidecar", `"Not An Image!"`},
		},
		{
			name: "both names", cluster: modern,
			init:       []corev1.Container{placeholder(custom)},
			containers: []corev1.Container{app, gke(custom)},
			wantDeny:   []string{"containers named both " + sc + " and gke-gcsfuse-sidecar (the GKE driver's name)"},
		},
		{
			name: "both names, both regular", cluster: old,
			containers: []corev1.Container{gke(custom), app, placeholder(custom)},
			wantDeny:   []string{"containers named both " + sc + " and gke-gcsfuse-sidecar"},
		},
		{
			name: "two GKE driver's placeholders", cluster: modern,
			init:       []corev1.Container{gke(custom)},
			containers: []corev1.Container{app, gke(custom)},
			wantDeny:   []string{"2 containers named gke-gcsfuse-sidecar"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := newPod(func(p *corev1.Pod) { p.Spec.InitContainers = tt.init; p.Spec.Containers = tt.containers })
			resp, out := admit(t, newMutator(t, tt.cluster), pod)
			if tt.wantDeny != nil {
				assertDenied(t, resp, tt.wantDeny...)
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
			if got := names(out.Spec.InitContainers); !reflect.DeepEqual(got, tt.wantInit) {
				t.Errorf("init containers = %v, want %v", got, tt.wantInit)
			}
			if got := names(out.Spec.Containers); !reflect.DeepEqual(got, tt.wantCtrs) {
				t.Errorf("containers = %v, want %v", got, tt.wantCtrs)
			}
			c, _ := sidecarOf(t, out)
			if c.Image != custom {
				t.Errorf("image = %q, want the lent %q", c.Image, custom)
			}
			if _, ok := envOf(c)["USER_ENV"]; ok {
				t.Errorf("the placeholder's env survived: %v", c.Env)
			}
			assertRestricted(t, c.SecurityContext)
		})
	}
}
