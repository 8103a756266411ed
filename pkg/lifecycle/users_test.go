package lifecycle

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// What the webhook writes on the sidecar (FindUsers(...).Env()) is what the node plugin
// and the sidecar read back, after the pod watch's Trim too: the init containers and the
// user's native sidecars that mount, and no others.
func TestUsersRoundTrip(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	after := []corev1.Container{
		{Name: "seed"}, {Name: "prep"},
		{Name: "shipper", RestartPolicy: &always}, {Name: "proxy", RestartPolicy: &always},
	}
	mounting := map[string]bool{"seed": true, "shipper": true}
	u := FindUsers(after, func(c corev1.Container) bool { return mounting[c.Name] })
	if !slices.Equal(u.Init, []string{"seed"}) || !slices.Equal(u.Sidecars, []string{"shipper"}) {
		t.Fatalf("FindUsers = %+v", u)
	}
	env := u.Env()
	if len(env) != len(UsersEnvNames) {
		t.Fatalf("Env() = %v, want %v", env, UsersEnvNames)
	}
	for i, name := range UsersEnvNames {
		if env[i].Name != name {
			t.Fatalf("Env()[%d] = %s, want %s", i, env[i].Name, name)
		}
	}
	sidecar := corev1.Container{Name: contract.SidecarContainerName, RestartPolicy: &always, Env: env}
	pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: append([]corev1.Container{sidecar}, after...), Containers: []corev1.Container{{Name: "main"}},
		Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}}}}}
	for _, p := range []*corev1.Pod{pod, Trim(pod, contract.DriverName)} {
		if got := InitUsers(p); !slices.Equal(got, u.Init) {
			t.Errorf("InitUsers = %v, want %v", got, u.Init)
		}
		if got := SidecarUsers(p); !slices.Equal(got, u.Sidecars) {
			t.Errorf("SidecarUsers = %v, want %v", got, u.Sidecars)
		}
	}
	// Empty lists are not written (the sidecar keeps its base environment); an absent init
	// list reads as every regular init container, as from an older webhook.
	none := FindUsers(after, func(corev1.Container) bool { return false }).Env()
	if len(none) != 0 {
		t.Errorf("Env of empty lists = %v, want no variable", none)
	}
	pod.Spec.InitContainers[0].Env = none
	if got := InitUsers(pod); !slices.Equal(got, []string{"seed", "prep"}) {
		t.Errorf("InitUsers without the list = %v, want every regular init container", got)
	}
	// A variable given twice reads as its last, as the container's environment has it.
	pod.Spec.InitContainers[0].Env = []corev1.EnvVar{{Name: contract.EnvSidecarUsers, Value: "a"}, {Name: contract.EnvSidecarUsers, Value: "shipper"}}
	if got := SidecarUsers(pod); !slices.Equal(got, []string{"shipper"}) {
		t.Errorf("SidecarUsers of a variable given twice = %v, want the last", got)
	}
}
