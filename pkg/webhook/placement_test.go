package webhook

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestLegacyInitContainers: a legacy sidecar starts only after the init containers, so a
// legacy pod whose init container mounts one of our volumes would stay Pending forever. It
// is refused, with a message that says why the sidecar is legacy and what to change.
func TestLegacyInitContainers(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	reader := func(name string, vols ...string) corev1.Container {
		c := corev1.Container{Name: name, Image: "busybox"}
		for _, v := range vols {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/" + v})
		}
		return c
	}
	otherVolumes := []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "secrets", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io"}}},
		{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "gcs-pvc"}}},
	}
	oldNode := fakeVersions{server: "v1.30.2", nodes: map[string]string{"new": "v1.30.2", "old": "v1.28.9"}}
	oldServer := fakeVersions{server: "v1.28.9", nodes: map[string]string{"new": "v1.30.2"}}
	moveAway := "Move the bucket access out of the init containers into a regular container"
	removeAnnotation := "Remove the annotation " + contract.AnnotationSidecarMode
	tests := []struct {
		name     string
		cluster  fakeVersions
		mods     []func(*corev1.Pod)
		init     []corev1.Container
		wantDeny []string // nil: admitted
		noDeny   []string // must not be in the denial
		wantWarn string
	}{
		{
			name: "automatic legacy: a node is older than 1.29", cluster: oldNode,
			init:     []corev1.Container{reader("warmup", "data")},
			wantDeny: []string{"init container warmup (volume data)", "Pending forever", "kubelet 1.28.9", "older than 1.29", moveAway, "nodes at Kubernetes 1.29 or newer"},
			noDeny:   []string{removeAnnotation, "Creating the pod again"},
		},
		{
			name: "automatic legacy: the pod's node is older than 1.29", cluster: oldNode,
			mods:     []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.NodeName = "old" }},
			init:     []corev1.Container{reader("warmup", "data")},
			wantDeny: []string{"node old runs kubelet 1.28.9", moveAway},
		},
		{
			name: "automatic legacy: the API server is older than 1.29", cluster: oldServer,
			init:     []corev1.Container{reader("warmup", "data")},
			wantDeny: []string{"the API server is 1.28.9", moveAway},
		},
		{
			name: "automatic legacy: versions unknown", cluster: fakeVersions{serverErr: errors.New("discovery down")},
			init:     []corev1.Container{reader("warmup", "data")},
			wantDeny: []string{"could not be checked", "discovery down", moveAway, "Creating the pod again may also work"},
		},
		{
			name: "several init containers read the bucket", cluster: old,
			mods: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, gcsVolume("model", nil))
			}},
			init:     []corev1.Container{reader("fetch", "model", "data"), reader("setup", "scratch"), reader("warmup", "data")},
			wantDeny: []string{"init containers fetch (volume model, data), warmup (volume data)"},
			noDeny:   []string{"setup"},
		},
		{
			name: "forced legacy on a cluster that supports native", cluster: modern,
			mods:     []func(*corev1.Pod){annotate(contract.AnnotationSidecarMode, contract.ModeLegacy)},
			init:     []corev1.Container{reader("warmup", "data")},
			wantDeny: []string{"init container warmup", contract.AnnotationSidecarMode + ": legacy", removeAnnotation, "serves them"},
			noDeny:   []string{"But ", moveAway},
		},
		{
			name: "forced legacy on a cluster that does not support native", cluster: old,
			mods:     []func(*corev1.Pod){annotate(contract.AnnotationSidecarMode, contract.ModeLegacy)},
			init:     []corev1.Container{reader("warmup", "data")},
			wantDeny: []string{removeAnnotation, "But the API server is 1.28.9", "move the bucket access out of the init containers"},
		},
		{
			name: "legacy, init containers use other volumes only", cluster: old,
			mods: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, otherVolumes...) }},
			init: []corev1.Container{reader("setup", "scratch", "secrets"), reader("plain")},
		},
		{
			// Without a VolumeClaims (newMutator's config) a claim is not resolved, so its
			// reader is admitted rather than every claim reader refused; claims_test.go has
			// the resolved case.
			name: "legacy, init container reads an unresolved persistentVolumeClaim", cluster: old,
			mods: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, otherVolumes...) }},
			init: []corev1.Container{reader("warmup", "claim")},
		},
		{
			name: "legacy, a native init container reads the bucket", cluster: modern,
			mods:     []func(*corev1.Pod){annotate(contract.AnnotationSidecarMode, contract.ModeLegacy)},
			init:     []corev1.Container{func() corev1.Container { c := reader("proxy", "data"); c.RestartPolicy = &always; return c }()},
			wantWarn: "init container proxy mounts gcsfuse volume data",
		},
		{
			name: "legacy, the lent sidecar placeholder mounts the volume", cluster: old,
			init: []corev1.Container{func() corev1.Container {
				c := reader(contract.SidecarContainerName, "data")
				c.Image = "example.com/custom:1"
				return c
			}()},
		},
		{
			name: "legacy, the GKE driver's lent sidecar placeholder mounts the volume", cluster: old,
			init: []corev1.Container{func() corev1.Container {
				c := reader("gke-gcsfuse-sidecar", "data")
				c.Image = "example.com/custom:1"
				return c
			}()},
		},
		{
			name: "native serves init containers", cluster: modern,
			init: []corev1.Container{reader("warmup", "data")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := newPod(append([]func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.InitContainers = tt.init }}, tt.mods...)...)
			resp, out := admit(t, newMutator(t, tt.cluster), pod)
			if tt.wantDeny != nil {
				assertDenied(t, resp, tt.wantDeny...)
				for _, s := range tt.noDeny {
					if strings.Contains(resp.Result.Message, s) {
						t.Errorf("message %q mentions %q", resp.Result.Message, s)
					}
				}
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
			sidecarOf(t, out)
			if tt.wantWarn != "" && !containsSubstring(resp.Warnings, tt.wantWarn) {
				t.Errorf("warnings = %q, want one containing %q", resp.Warnings, tt.wantWarn)
			}
			if tt.wantWarn == "" && len(resp.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", resp.Warnings)
			}
		})
	}
}

// TestInitContainersEnv: a native sidecar is told which regular init containers after it
// read the bucket, in order, so that it keeps serving them when the pod is deleted during
// its init phase. Without such containers the sidecar's env is exactly what it was.
func TestInitContainersEnv(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	ctr := func(name string, vols ...string) corev1.Container {
		c := corev1.Container{Name: name, Image: "busybox"}
		for _, v := range vols {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v, MountPath: "/" + v})
		}
		return c
	}
	native := func(c corev1.Container) corev1.Container { c.RestartPolicy = &always; return c }
	withModel := func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, gcsVolume("model", nil),
			corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	const custom = "example.com/gcsfuse-sidecar:custom"
	tests := []struct {
		name       string
		cluster    fakeVersions
		mods       []func(*corev1.Pod)
		init       []corev1.Container
		wantNative bool
		want       string // "": the env var is absent
		wantUsers  string // contract.EnvSidecarUsers; "": absent
		wantImage  string
	}{
		{
			name: "readers listed in order", cluster: modern, wantNative: true,
			mods: []func(*corev1.Pod){withModel},
			init: []corev1.Container{ctr("setup", "scratch"), ctr("warmup", "data"), native(ctr("proxy", "data")),
				ctr("fetch", "scratch", "model"), ctr("late", "scratch"), ctr("check", "data", "model")},
			want: "warmup,fetch,check", wantUsers: "proxy",
		},
		{
			name: "after a native istio-proxy", cluster: modern, wantNative: true,
			init: []corev1.Container{native(ctr("istio-proxy")), ctr("warmup", "data")},
			want: "warmup",
		},
		{
			name: "lent image: the placeholder is not a reader", cluster: modern, wantNative: true,
			init: []corev1.Container{
				func() corev1.Container { c := ctr(contract.SidecarContainerName, "data"); c.Image = custom; return c }(),
				ctr("warmup", "data"),
			},
			want: "warmup", wantImage: custom,
		},
		{
			name: "lent image: the GKE driver's placeholder is not a reader", cluster: modern, wantNative: true,
			init: []corev1.Container{
				func() corev1.Container { c := ctr("gke-gcsfuse-sidecar", "data"); c.Image = custom; return c }(),
				ctr("warmup", "data"),
			},
			want: "warmup", wantImage: custom,
		},
		{name: "no init containers", cluster: modern, wantNative: true},
		{
			name: "init containers that do not read the bucket", cluster: modern, wantNative: true,
			mods: []func(*corev1.Pod){withModel},
			init: []corev1.Container{ctr("setup", "scratch"), ctr("plain")},
		},
		{
			name: "only native init containers read the bucket", cluster: modern, wantNative: true,
			init:      []corev1.Container{native(ctr("proxy", "data"))},
			wantUsers: "proxy",
		},
		{
			name: "legacy", cluster: old,
			mods: []func(*corev1.Pod){withModel},
			init: []corev1.Container{ctr("setup", "scratch"), native(ctr("proxy", "data"))},
		},
		{
			name: "forced legacy", cluster: modern,
			mods: []func(*corev1.Pod){withModel, annotate(contract.AnnotationSidecarMode, contract.ModeLegacy)},
			init: []corev1.Container{ctr("setup", "scratch")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := newPod(append([]func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.InitContainers = tt.init }}, tt.mods...)...)
			_, out := mustAdmit(t, newMutator(t, tt.cluster), pod)
			assertMode(t, out, tt.wantNative)
			c, _ := sidecarOf(t, out)
			if tt.wantImage != "" && c.Image != tt.wantImage {
				t.Errorf("image = %q, want %q", c.Image, tt.wantImage)
			}
			var got []string
			for _, e := range c.Env {
				if e.Name == contract.EnvInitContainers {
					got = append(got, e.Value)
				}
			}
			switch {
			case tt.want == "" && len(got) > 0:
				t.Errorf("%s = %q, want it absent", contract.EnvInitContainers, got)
			case tt.want != "" && !reflect.DeepEqual(got, []string{tt.want}):
				t.Errorf("%s = %q, want [%q]", contract.EnvInitContainers, got, tt.want)
			}
			if got, ok := envOf(c)[contract.EnvSidecarUsers]; got != tt.wantUsers || ok != (tt.wantUsers != "") {
				t.Errorf("%s = %q (present %v), want %q", contract.EnvSidecarUsers, got, ok, tt.wantUsers)
			}
			if tt.want == "" && tt.wantUsers == "" {
				// The zero-overhead path: the sidecar's env is exactly the base variables.
				if want := []string{contract.EnvGraceSeconds, contract.EnvSidecarMode, contract.EnvPodNamespace, contract.EnvPodName}; !reflect.DeepEqual(envNames(c), want) {
					t.Errorf("env = %v, want %v", envNames(c), want)
				}
			}

			// Re-invocation leaves the sidecar, and so the variable, as it is.
			for _, cv := range []fakeVersions{modern, old} {
				resp, again := mustAdmit(t, newMutator(t, cv), out)
				if resp.Patch != nil {
					t.Fatalf("re-invocation patched: %s", resp.Patch)
				}
				c2, _ := sidecarOf(t, again)
				if !reflect.DeepEqual(c2.Env, c.Env) {
					t.Errorf("env after re-invocation = %v, want %v", c2.Env, c.Env)
				}
			}
		})
	}
}

func envNames(c corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		out = append(out, e.Name)
	}
	return out
}

// TestReinvocationAfterInitContainersChanged: a later webhook that adds or removes init
// containers re-invokes us. The sidecar stays, but the native sidecar's list of init
// containers to serve follows the change, and a legacy pod that now has an init container
// reading the bucket (it would stay Pending forever) is refused.
func TestReinvocationAfterInitContainersChanged(t *testing.T) {
	reader := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}
	}
	tests := []struct {
		name     string
		injected fakeVersions // where the first invocation ran
		cluster  fakeVersions // where the re-invocation runs
		init     []corev1.Container
		later    func(p *corev1.Pod) // what the later webhook does
		want     string              // the variable after re-invocation; "": absent
		wantDeny []string
	}{
		{
			name: "native: a reader appended", injected: modern, cluster: modern,
			later: func(p *corev1.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, reader("late")) },
			want:  "late",
		},
		{
			name: "native: a reader inserted before an existing one", injected: modern, cluster: modern,
			init: []corev1.Container{reader("warmup")},
			later: func(p *corev1.Pod) {
				i := nativeSidecarIndex(t, p) + 1
				p.Spec.InitContainers = append(p.Spec.InitContainers[:i], append([]corev1.Container{reader("first")}, p.Spec.InitContainers[i:]...)...)
			},
			want: "first,warmup",
		},
		{
			name: "native: the only reader removed", injected: modern, cluster: modern,
			init:  []corev1.Container{reader("warmup")},
			later: func(p *corev1.Pod) { p.Spec.InitContainers = p.Spec.InitContainers[:nativeSidecarIndex(t, p)+1] },
		},
		{
			name: "legacy: a reader added", injected: old, cluster: old,
			later:    func(p *corev1.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, reader("late")) },
			wantDeny: []string{"init container late (volume data)", "Pending forever", "older than 1.29"},
		},
		{
			name: "legacy copy admitted where native works: a reader added", injected: old, cluster: modern,
			later: func(p *corev1.Pod) {
				p.Spec.InitContainers = append(p.Spec.InitContainers, reader("late"))
			},
			wantDeny: []string{"init container late (volume data)", "already has a regular " + contract.SidecarContainerName},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, once := mustAdmit(t, newMutator(t, tt.injected), newPod(func(p *corev1.Pod) { p.Spec.InitContainers = tt.init }))
			tt.later(once)
			resp, twice := admit(t, newMutator(t, tt.cluster), once)
			if tt.wantDeny != nil {
				assertDenied(t, resp, tt.wantDeny...)
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %s", resp.Result.Message)
			}
			if resp.Patch == nil {
				t.Fatal("re-invocation did not update the sidecar")
			}
			assertMode(t, twice, true)
			c, _ := sidecarOf(t, twice)
			env := envOf(c)
			if got, ok := env[contract.EnvInitContainers]; got != tt.want || ok != (tt.want != "") {
				t.Errorf("%s = %q (present %v), want %q", contract.EnvInitContainers, got, ok, tt.want)
			}
			if want := names(once.Spec.InitContainers); !reflect.DeepEqual(names(twice.Spec.InitContainers), want) {
				t.Errorf("init containers = %v, want %v unchanged", names(twice.Spec.InitContainers), want)
			}
			// And the next re-invocation has nothing left to do.
			if again, _ := mustAdmit(t, newMutator(t, tt.cluster), twice); again.Patch != nil {
				t.Errorf("third invocation patched: %s", again.Patch)
			}
		})
	}
}
