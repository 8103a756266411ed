package nodeplugin

import (
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/csidriver"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitcoord"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podmetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
)

// currentWatcher answers the lifecycle's pod lookups from the pod watch that runs now: the
// supervisor builds a new one if a watch ever ends.
type currentWatcher struct {
	w          atomic.Pointer[podwatch.Watcher]
	driverName string
	// mounter, if set, is the shared mounter's metrics source (set before the metrics
	// server starts).
	mounter func() (podmetrics.Pod, bool)
}

func (c *currentWatcher) set(w *podwatch.Watcher) { c.w.Store(w) }

// podLookup is csidriver.Config.Pods from the pod watcher's cache; nil without one.
func podLookup(pods exitcoord.PodLookup) csidriver.PodLookup {
	if pods == nil {
		return nil
	}
	return func(uid string) (*corev1.Pod, bool) { return pods.PodByUID(types.UID(uid)) }
}

// PodByUID implements exitcoord.PodLookup.
func (c *currentWatcher) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	if w := c.w.Load(); w != nil {
		return w.PodByUID(uid)
	}
	return nil, false
}

// driverPods lists the pods of the current watch that use the driver.
func (c *currentWatcher) driverPods() []*corev1.Pod {
	if w := c.w.Load(); w != nil {
		return w.DriverPods()
	}
	return nil
}

// metricsPods lists the pods whose sidecar metrics the node plugin re-exports.
func (c *currentWatcher) metricsPods() []podmetrics.Pod {
	var out []podmetrics.Pod
	for _, p := range c.driverPods() {
		if mp, ok := podmetrics.FromPod(p, c.driverName); ok {
			out = append(out, mp)
		}
	}
	if c.mounter != nil {
		if mp, ok := c.mounter(); ok {
			out = append(out, mp)
		}
	}
	return out
}
