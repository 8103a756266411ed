package nodeplugin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

type podsByUID map[types.UID]*corev1.Pod

func (p podsByUID) PodByUID(uid types.UID) (*corev1.Pod, bool) { pod, ok := p[uid]; return pod, ok }

func TestPodLookup(t *testing.T) {
	if podLookup(nil) != nil {
		t.Fatal("a lookup without a pod watcher")
	}
	pods := podsByUID{"known": {Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: contract.SidecarContainerName}}}}}
	lookup := podLookup(pods)
	if p, ok := lookup("known"); !ok || p != pods["known"] {
		t.Errorf("known pod: %v, %v", p, ok)
	}
	if p, ok := lookup("unknown"); ok || p != nil {
		t.Errorf("unknown pod: %v, %v", p, ok)
	}
}
