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
	for i, name := range usersEnvNames {
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
	// Empty lists are written, and read as empty: not as "an older webhook wrote none".
	none := FindUsers(after, func(corev1.Container) bool { return false }).Env()
	pod.Spec.InitContainers[0].Env = none
	if got := InitUsers(pod); len(got) != 0 {
		t.Errorf("InitUsers with an empty list = %v, want none", got)
	}
}
