package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

type podsByUID map[types.UID]*corev1.Pod

func (p podsByUID) PodByUID(uid types.UID) (*corev1.Pod, bool) { pod, ok := p[uid]; return pod, ok }

func TestHasSidecar(t *testing.T) {
	if hasSidecar(nil) != nil {
		t.Fatal("a lookup without a pod watcher")
	}
	pods := podsByUID{
		"native": {Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: contract.SidecarContainerName}}, Containers: []corev1.Container{{Name: "app"}}}},
		"legacy": {Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: contract.SidecarContainerName}, {Name: "app"}}}},
		"none":   {Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}},
	}
	lookup := hasSidecar(pods)
	for uid, want := range map[string][2]bool{"native": {true, true}, "legacy": {true, true}, "none": {false, true}, "unknown": {false, false}} {
		if has, known := lookup(uid); has != want[0] || known != want[1] {
			t.Errorf("%s: has, known = %v, %v; want %v, %v", uid, has, known, want[0], want[1])
		}
	}
}
