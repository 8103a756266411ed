package lifecycle

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// Users are the containers after a native sidecar that use the driver's mounts, as the
// webhook finds them at admission (FindUsers) and writes them on the sidecar (Env), and as
// the sidecar and the node plugin read them back (InitUsers, SidecarUsers): one codec, so
// that what is written is what is read, and what Trim keeps.
type Users struct {
	// Init are the regular init containers that mount a volume (InitContainerUsers), in
	// contract.EnvInitContainers.
	Init []string
	// Sidecars are the user's native sidecars that mount one (NativeSidecarUsers), in
	// contract.EnvSidecarUsers.
	Sidecars []string
}

// UsersEnvNames are the sidecar's variables that carry Users, in the order Env writes them.
var UsersEnvNames = []string{contract.EnvInitContainers, contract.EnvSidecarUsers}

// FindUsers finds the Users among the containers after a native sidecar (after); mounts says
// whether a container mounts one of the driver's volumes, inline or through a claim.
func FindUsers(after []corev1.Container, mounts func(corev1.Container) bool) Users {
	return Users{Init: InitContainerUsers(after, mounts), Sidecars: NativeSidecarUsers(after, mounts)}
}

// Env is u as the sidecar's variables, in UsersEnvNames' order, comma separated, each only
// when its list is not empty: a pod none of whose containers after the sidecar mount a
// volume keeps the sidecar's base environment. An absent contract.EnvInitContainers reads
// as every regular init container (InitUsers), as for a sidecar an older webhook injected:
// waiting for one that does not mount costs time at a deletion during the init phase,
// never data.
func (u Users) Env() []corev1.EnvVar {
	var env []corev1.EnvVar
	if len(u.Init) > 0 {
		env = append(env, corev1.EnvVar{Name: contract.EnvInitContainers, Value: strings.Join(u.Init, ",")})
	}
	if len(u.Sidecars) > 0 {
		env = append(env, corev1.EnvVar{Name: contract.EnvSidecarUsers, Value: strings.Join(u.Sidecars, ",")})
	}
	return env
}

// readUsers reads Users from the sidecar's variables; hasInit reports whether
// contract.EnvInitContainers is there (a sidecar an older webhook injected has neither). A
// variable given twice reads as its last, as the container's environment has it.
func readUsers(sidecar *corev1.Container) (u Users, hasInit bool) {
	for _, e := range sidecar.Env {
		switch e.Name {
		case contract.EnvInitContainers:
			u.Init, hasInit = splitNames(e.Value), true
		case contract.EnvSidecarUsers:
			u.Sidecars = splitNames(e.Value)
		}
	}
	return u, hasInit
}
