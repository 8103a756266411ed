package podwatch

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/ownership"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestTrimPod(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	grace := int64(77)
	now := metav1.NewTime(t1)
	full := jobPod("p", "uid", node)
	full.DeletionTimestamp = &now
	full.OwnerReferences = []metav1.OwnerReference{{Name: "job"}}
	full.Annotations[contract.AnnotationIgnoreContainers] = "istio-proxy"
	full.Spec.TerminationGracePeriodSeconds = &grace
	full.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "envoy", RestartPolicy: &always}}
	full.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}}
	full.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.1"}}
	setState(full, "main", exited(0, strings.Repeat("m", 4096)))
	setState(full, contract.SidecarContainerName, exited(1, "auth failed"))
	before := full.DeepCopy()

	obj, err := trimPod(contract.DriverName)(full)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*corev1.Pod)
	if !reflect.DeepEqual(full, before) {
		t.Error("trimPod modified its input")
	}

	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: ns, UID: "uid", DeletionTimestamp: &now,
			Annotations: map[string]string{
				contract.AnnotationInject:           "true",
				contract.AnnotationIgnoreContainers: "istio-proxy",
			},
		},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			InitContainers:                []corev1.Container{{Name: "proxy", RestartPolicy: &always}},
			Containers:                    []corev1.Container{{Name: "main"}, {Name: contract.SidecarContainerName}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: contract.DriverName}}},
				{Name: contract.TmpVolumeName, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "main", State: exited(0, "")},
				{Name: contract.SidecarContainerName, State: exited(1, "auth failed")},
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("trimPod(contract.DriverName)() =\n%v\nwant\n%v", got, want)
	}

	again, _ := trimPod(contract.DriverName)(got)
	if !reflect.DeepEqual(again, got) {
		t.Error("trimPod is not idempotent")
	}

	// The trimmed pod must lead to the same decisions as the full one.
	if a, b := lifecycle.Decide(full), lifecycle.Decide(got); !reflect.DeepEqual(a, b) {
		t.Errorf("Decide(full) = %+v, Decide(trimmed) = %+v", a, b)
	}
	f1, c1, m1 := lifecycle.SidecarFailure(full)
	f2, c2, m2 := lifecycle.SidecarFailure(got)
	if f1 != f2 || c1 != c2 || m1 != m2 || !f2 {
		t.Errorf("SidecarFailure full = (%v,%d,%q), trimmed = (%v,%d,%q)", f1, c1, m1, f2, c2, m2)
	}
}

// The node plugin decides a mount's owner (pkg/ownership) and which native sidecars to
// wait for (lifecycle.SidecarUsers) from the cached pod: the trimmed pod must give the same
// answers as the full one.
func TestTrimPodKeepsOwnershipAndSidecarUsers(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	uid, other := int64(50000), int64(7)
	full := jobPod("p", "uid", node)
	full.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, FSGroup: &uid}
	full.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: "x"}}
	full.Spec.InitContainers = []corev1.Container{
		{Name: contract.SidecarContainerName, RestartPolicy: &always, Image: "sidecar", Env: []corev1.EnvVar{
			{Name: contract.EnvSidecarUsers, Value: "shipper"}, {Name: "OTHER", Value: "dropped"}}},
		{Name: "shipper", RestartPolicy: &always, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/logs"}}},
		{Name: "proxy", RestartPolicy: &always, SecurityContext: &corev1.SecurityContext{RunAsUser: &other}},
	}
	full.Spec.Containers = full.Spec.Containers[:1] // native: the sidecar is an init container
	obj, err := trimPod(contract.DriverName)(full)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*corev1.Pod)
	if a, b := lifecycle.SidecarUsers(full), lifecycle.SidecarUsers(got); !reflect.DeepEqual(a, b) || len(b) != 1 {
		t.Errorf("SidecarUsers full = %q, trimmed = %q", a, b)
	}
	u1, w1, ok1 := ownership.SoleUser(full, "data", contract.SidecarContainerName)
	u2, w2, ok2 := ownership.SoleUser(got, "data", contract.SidecarContainerName)
	if u1 != u2 || !reflect.DeepEqual(w1, w2) || ok1 != ok2 || !ok2 || u2 != uid {
		t.Errorf("SoleUser full = %d %q %v, trimmed = %d %q %v", u1, w1, ok1, u2, w2, ok2)
	}
	if env := got.Spec.InitContainers[0].Env; len(env) != 1 {
		t.Errorf("sidecar env kept %v, want only %s", env, contract.EnvSidecarUsers)
	}
}

func TestTrimPodKeepsOnlyIdentityOfPodsNotUsingTheDriver(t *testing.T) {
	p := jobPod("p", "uid", node)
	p.Spec.Containers = p.Spec.Containers[:1]
	p.Spec.Volumes = p.Spec.Volumes[1:]
	obj, _ := trimPod(contract.DriverName)(p)
	got := obj.(*corev1.Pod)
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns, UID: "uid"},
		Spec:       corev1.PodSpec{NodeName: node},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("trimPod(contract.DriverName)() = %v, want %v", got, want)
	}

	// An inline CSI volume alone makes the pod ours, sidecar or not.
	p = jobPod("p", "uid", node)
	p.Spec.Containers = p.Spec.Containers[:1]
	obj, _ = trimPod(contract.DriverName)(p)
	if got := obj.(*corev1.Pod); len(got.Spec.Containers) != 1 || len(got.Status.ContainerStatuses) != 2 {
		t.Errorf("pod with a %s volume was trimmed to %v", contract.DriverName, got)
	}

	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: p}
	if obj, err := trimPod(contract.DriverName)(tomb); err != nil || !reflect.DeepEqual(obj, tomb) {
		t.Errorf("trimPod(contract.DriverName)(tombstone) = %v, %v; want it unchanged", obj, err)
	}
}
