package lifecycle

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func initStatuses(st ...corev1.ContainerStatus) podOpt {
	return func(p *corev1.Pod) { p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, st...) }
}

// withNativeInit adds, after the native sidecar, an istio-like native sidecar and two
// regular init containers.
func withNativeInit(p *corev1.Pod) {
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = append(p.Spec.InitContainers,
		corev1.Container{Name: "istio-proxy", RestartPolicy: &always},
		corev1.Container{Name: "fetch"},
		corev1.Container{Name: "index"})
}

// withInitUsers sets what the webhook listed in the native sidecar's
// contract.EnvInitContainers: the regular init containers that mount a volume.
func withInitUsers(p *corev1.Pod, users string) *corev1.Pod {
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; c.Name == contract.SidecarContainerName {
			c.Env = append(c.Env, corev1.EnvVar{Name: contract.EnvInitContainers, Value: users})
		}
	}
	return p
}

func TestMountUsers(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"legacy: workload only, init containers ran before the sidecar",
			legacyPod([]string{"a", "b"}, initContainers("setup"), annotate(contract.AnnotationIgnoreContainers, "b")), []string{"a"}},
		{"native, sidecar from an older webhook: every regular init container, then workload",
			nativePod([]string{"main"}, withNativeInit), []string{"fetch", "index", "main"}},
		{"native: the init containers the webhook found mounting a volume, then workload",
			withInitUsers(nativePod([]string{"main"}, withNativeInit), "index"), []string{"index", "main"}},
		{"native: no init container mounts a volume",
			withInitUsers(nativePod([]string{"main"}, withNativeInit), ""), []string{"main"}},
		{"no sidecar", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MountUsers(tt.pod); !slices.Equal(got, tt.want) {
				t.Fatalf("MountUsers = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestInitContainersSucceeded(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"all regular init containers exited 0", nativePod([]string{"main"}, withNativeInit,
			initStatuses(running("istio-proxy"), terminated("fetch", 0, t1), terminated("index", 0, t1))), true},
		{"one still running", nativePod([]string{"main"}, withNativeInit,
			initStatuses(terminated("fetch", 0, t1), running("index"))), false},
		{"one failed", nativePod([]string{"main"}, withNativeInit,
			initStatuses(terminated("fetch", 0, t1), terminated("index", 1, t1))), false},
		{"one failed and waits for a retry", nativePod([]string{"main"}, withNativeInit,
			initStatuses(terminated("fetch", 0, t1), backOff("index", 1, t1))), false},
		{"no status yet", nativePod([]string{"main"}, withNativeInit), false},
		{"no regular init container", nativePod([]string{"main"}), false},
		{"legacy", legacyPod([]string{"main"}, initContainers("fetch"),
			initStatuses(terminated("fetch", 0, t1))), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InitContainersSucceeded(tt.pod); got != tt.want {
				t.Fatalf("InitContainersSucceeded = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNeedsRuntimeFollow(t *testing.T) {
	tests := []struct {
		name     string
		pod      *corev1.Pod
		want     bool
		wantRule Rule
	}{
		{"legacy deleted, app running", legacyPod([]string{"app"}, deleting(), statuses(running("app"))), true, RuleDeletingWorkloadRunning},
		{"legacy deleted before any status", legacyPod([]string{"app"}, deleting()), true, RuleDeletingWorkloadRunning},
		{"legacy deleted, app terminated", legacyPod([]string{"app"}, deleting(), statuses(terminated("app", 0, t1))), false, ""},
		{"legacy not deleted", legacyPod([]string{"app"}, statuses(running("app"))), false, ""},
		{"native deleted during init", nativePod([]string{"main"}, withNativeInit, deleting(),
			initStatuses(running("istio-proxy"), terminated("fetch", 0, t1), running("index"))), true, RuleDeletingInitRunning},
		{"native deleted before any init status", nativePod([]string{"main"}, withNativeInit, deleting()), true, RuleDeletingInitRunning},
		{"native deleted while only an init container that does not mount runs", withInitUsers(nativePod([]string{"main"}, withNativeInit, deleting(),
			initStatuses(terminated("fetch", 0, t1), running("index"))), "fetch"), true, RuleDeletingWorkloadRunning},
		{"native deleted after init, app running", nativePod([]string{"main"}, withNativeInit, deleting(),
			initStatuses(terminated("fetch", 0, t1), terminated("index", 0, t1)), statuses(running("main"))), true, RuleDeletingWorkloadRunning},
		{"native without regular init containers, app running", nativePod([]string{"main"}, deleting(), statuses(running("main"))), true, RuleDeletingWorkloadRunning},
		{"native deleted, app terminated", nativePod([]string{"main"}, deleting(), statuses(terminated("main", 0, t1))), false, ""},
		{"native in init, not deleted", nativePod([]string{"main"}, withNativeInit, initStatuses(running("fetch"))), false, ""},
		{"terminal phase", legacyPod([]string{"app"}, deleting(), phase(corev1.PodFailed)), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, got := NeedsRuntimeFollow(tt.pod)
			if got != tt.want || (got && (d.Rule != tt.wantRule || d.Done || d.Reason == "")) {
				t.Fatalf("NeedsRuntimeFollow = %+v, %v; want %v with rule %q", d, got, tt.want, tt.wantRule)
			}
		})
	}
}

// The webhook's classification of the init containers after a native sidecar: regular ones
// that mount a volume of the driver go in contract.EnvInitContainers, the user's native
// sidecars that do in contract.EnvSidecarUsers; order kept, ours never counted.
func TestInitContainerAndNativeSidecarUsers(t *testing.T) {
	always, never := corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicy("Never")
	c := func(name string, policy *corev1.ContainerRestartPolicy, vols ...string) corev1.Container {
		ct := corev1.Container{Name: name, RestartPolicy: policy}
		for _, v := range vols {
			ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: v})
		}
		return ct
	}
	// mounts: the driver's volumes are "data" and "claimed".
	mounts := func(ct corev1.Container) bool {
		return slices.ContainsFunc(ct.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "data" || m.Name == "claimed" })
	}
	tests := []struct {
		name           string
		after          []corev1.Container
		init, sidecars []string
	}{
		{"none", nil, nil, nil},
		{"regular and native users, in order, among others",
			[]corev1.Container{c("warmup", nil, "data"), c("logship", &always, "data"), c("proxy", &always, "scratch"), c("index", nil, "scratch", "claimed"),
				c("plain", nil), c("uploader", &always, "claimed")},
			[]string{"warmup", "index"}, []string{"logship", "uploader"}},
		{"a restartPolicy other than Always is a regular init container", []corev1.Container{c("odd", &never, "data")}, []string{"odd"}, nil},
		{"ours is not a user of itself", []corev1.Container{c(contract.SidecarContainerName, &always, "data")}, nil, nil},
		{"nothing mounts the driver's volumes", []corev1.Container{c("a", nil, "scratch"), c("b", &always)}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InitContainerUsers(tt.after, mounts); !slices.Equal(got, tt.init) {
				t.Errorf("InitContainerUsers = %q, want %q", got, tt.init)
			}
			if got := NativeSidecarUsers(tt.after, mounts); !slices.Equal(got, tt.sidecars) {
				t.Errorf("NativeSidecarUsers = %q, want %q", got, tt.sidecars)
			}
		})
	}
}
