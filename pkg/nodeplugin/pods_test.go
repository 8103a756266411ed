package nodeplugin

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podmetrics"
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

// The shared mounter's gcsfuse series are scraped whether or not a driver pod runs on the
// node (a node whose pods all use shared volumes carries no sidecar): with no pod watch
// yet, or no pod, the mounter is still listed.
func TestMetricsPodsListTheMounterAlone(t *testing.T) {
	mounter := podmetrics.Pod{UID: "shared-mounter", Name: contract.SharedMounterContainerName, Volumes: []string{"key-a"}}
	c := &currentWatcher{driverName: contract.DriverName, mounter: func() (podmetrics.Pod, bool) { return mounter, true }}
	if got := c.metricsPods(); len(got) != 1 || got[0].UID != "shared-mounter" {
		t.Errorf("metricsPods() = %+v, want the shared mounter alone", got)
	}
	c.mounter = func() (podmetrics.Pod, bool) { return podmetrics.Pod{}, false }
	if got := c.metricsPods(); len(got) != 0 {
		t.Errorf("a mounter with no key: metricsPods() = %+v, want none", got)
	}
}
