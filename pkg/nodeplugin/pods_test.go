package nodeplugin

import (
	"context"
	"io"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitcoord"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podmetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podwatch"
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

// The pod lookups (the node service's sidecar check and owner, the exit coordinator, the
// shared mounter's Events and metrics) answer from the pod watch that runs now: nothing
// before one is set, then the pods of its cache by UID, and only this node's driver pods
// are listed.
func TestCurrentWatcherAnswersFromTheRunningWatch(t *testing.T) {
	c := &currentWatcher{driverName: contract.DriverName}
	if p, ok := c.PodByUID("uid-1"); ok || p != nil || c.driverPods() != nil {
		t.Fatalf("before any watch: PodByUID = %v, %v; driverPods = %v", p, ok, c.driverPods())
	}
	withSidecar := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: contract.SidecarContainerName}, {Name: "app"}}}}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "ns", UID: "uid-2"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app"}}}}
	client := fake.NewClientset(withSidecar, plain)
	w := podwatch.New(client, "n1", &exitcoord.ExitCoordinator{Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		podwatch.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))), podwatch.WithDriverName(contract.DriverName))
	c.set(w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitfor.Until(t, waitBound, "the running watch's pods to reach PodByUID", func() bool {
		_, ok := c.PodByUID("uid-2")
		return ok
	})
	if p, ok := c.PodByUID("uid-1"); !ok || p.Name != "p" {
		t.Errorf("PodByUID(uid-1) = %v, %v; want pod p", p, ok)
	}
	if p, ok := c.PodByUID("uid-unknown"); ok || p != nil {
		t.Errorf("PodByUID of an unknown pod = %v, %v", p, ok)
	}
	if got := c.driverPods(); len(got) != 1 || got[0].UID != "uid-1" {
		t.Errorf("driverPods() = %v, want the pod with the sidecar alone", got)
	}
}
