package webhook

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func nativeMounting(name string, vols ...string) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c := mounting(name, vols...)
	c.RestartPolicy = &always
	return c
}

// The user's own native sidecars after ours that mount a volume of the driver (inline or a
// claim) are named, in order, in contract.EnvSidecarUsers of a native sidecar: the node
// plugin waits for them before telling ours the workload is done. Regular init containers,
// native sidecars without a mount of ours, and legacy pods get nothing.
func TestSidecarUsersEnv(t *testing.T) {
	claims := newCountingClaims(map[string]ClaimedVolume{"gcs-pvc": ourClaim(nil)})
	withClaim := func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, claimVolume("claimed", "gcs-pvc"),
			corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	for _, tt := range []struct {
		name    string
		cluster fakeVersions
		mods    []func(*corev1.Pod)
		init    []corev1.Container
		want    string // "": absent
	}{
		{name: "inline and claim users in order", cluster: modern, mods: []func(*corev1.Pod){withClaim},
			init: []corev1.Container{nativeMounting("logship", "data"), mounting("warmup", "data"), nativeMounting("proxy", "scratch"),
				nativeMounting("uploader", "claimed")},
			want: "logship,uploader"},
		{name: "after a native istio-proxy", cluster: modern,
			init: []corev1.Container{nativeMounting(istioProxyName), nativeMounting("logship", "data")},
			want: "logship"},
		{name: "native sidecars without our volumes", cluster: modern, mods: []func(*corev1.Pod){withClaim},
			init: []corev1.Container{nativeMounting("proxy", "scratch")}},
		{name: "legacy", cluster: old, init: []corev1.Container{nativeMounting("logship", "data")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := newPod(append([]func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.InitContainers = tt.init }}, tt.mods...)...)
			_, out := mustAdmit(t, claimMutator(t, tt.cluster, claims), pod)
			c, _ := sidecarOf(t, out)
			if got, ok := envOf(c)[contract.EnvSidecarUsers]; got != tt.want || ok != (tt.want != "") {
				t.Errorf("%s = %q (present %v), want %q", contract.EnvSidecarUsers, got, ok, tt.want)
			}
		})
	}
}

// On re-invocation contract.EnvSidecarUsers follows the init containers like
// contract.EnvInitContainers: added, replaced, removed; both removed at once must leave the
// right variables (the second removal's index accounts for the first).
func TestSidecarUsersEnvOnReinvocation(t *testing.T) {
	for _, tt := range []struct {
		name                string
		init                []corev1.Container
		later               func(p *corev1.Pod)
		wantInit, wantUsers string
		noPatch             bool // the variables are already right
	}{
		{name: "a user appended",
			later: func(p *corev1.Pod) {
				p.Spec.InitContainers = append(p.Spec.InitContainers, nativeMounting("logship", "data"))
			},
			wantUsers: "logship"},
		{name: "a user added to a list", init: []corev1.Container{nativeMounting("logship", "data")},
			later: func(p *corev1.Pod) {
				p.Spec.InitContainers = append(p.Spec.InitContainers, nativeMounting("audit", "data"))
			},
			wantUsers: "logship,audit"},
		{name: "a native sidecar put before ours is not a user", init: []corev1.Container{nativeMounting("logship", "data")},
			later: func(p *corev1.Pod) {
				p.Spec.InitContainers = append([]corev1.Container{nativeMounting("early", "data")}, p.Spec.InitContainers...)
			},
			wantUsers: "logship", noPatch: true},
		{name: "both lists emptied", init: []corev1.Container{mounting("warmup", "data"), nativeMounting("logship", "data")},
			later: func(p *corev1.Pod) { p.Spec.InitContainers = p.Spec.InitContainers[:nativeSidecarIndex(t, p)+1] }},
		{name: "one list emptied, the other changed", init: []corev1.Container{mounting("warmup", "data"), nativeMounting("logship", "data")},
			later: func(p *corev1.Pod) {
				p.Spec.InitContainers = append(p.Spec.InitContainers[:nativeSidecarIndex(t, p)+1], nativeMounting("audit", "data"))
			},
			wantUsers: "audit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, once := mustAdmit(t, newMutator(t, modern), newPod(func(p *corev1.Pod) { p.Spec.InitContainers = tt.init }))
			tt.later(once)
			resp, twice := mustAdmit(t, newMutator(t, modern), once)
			if (resp.Patch == nil) != tt.noPatch {
				t.Fatalf("re-invocation patch %s, want one: %v", resp.Patch, !tt.noPatch)
			}
			c, _ := sidecarOf(t, twice)
			env := envOf(c)
			for name, want := range map[string]string{contract.EnvInitContainers: tt.wantInit, contract.EnvSidecarUsers: tt.wantUsers} {
				if got, ok := env[name]; got != want || ok != (want != "") {
					t.Errorf("%s = %q (present %v), want %q", name, got, ok, want)
				}
			}
			// The rest of the env is untouched.
			base := []string{contract.EnvGraceSeconds, contract.EnvSidecarMode, contract.EnvPodNamespace, contract.EnvPodName}
			if got := envNames(c); !reflect.DeepEqual(got[:len(base)], base) {
				t.Errorf("env = %v, want it to start with %v", got, base)
			}
			if again, _ := mustAdmit(t, newMutator(t, modern), twice); again.Patch != nil {
				t.Errorf("third invocation patched: %s", again.Patch)
			}
		})
	}
}
