package csidriver

import (
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	corev1 "k8s.io/api/core/v1"
)

// wiredMetrics is a recorder of a type of its own, to see it reach each mounter.
type wiredMetrics struct{ nodevolume.NoStatus }

// TestEachSettingReachesItsMounter: every setting of the node service lands in the field of
// the piece that uses it, each given a value of its own so that one passed as another (the
// linger as the offer wait, the uid as the gid) fails here: without root nothing else shows
// it, and with it only a hand-off would.
func TestEachSettingReachesItsMounter(t *testing.T) {
	cfg := Config{
		KubeletRoot: "/kubelet", SidecarUID: 1001, SidecarGID: 2002, UnmountBusyWait: 3 * time.Second,
		StateDir: "/state", CABundle: []byte("ca"), SharedDir: "/shared", MounterTmpPath: "/mounter-tmp",
		SharedLinger: 4 * time.Second, SharedOfferWait: 5 * time.Second,
		SharedADC:   credentials.SharedADC{"adc-ns"},
		Credentials: credentials.Config{SharedProvider: "shared-provider"},
	}
	terminating := 0
	cfg.OnTerminating = func(PodRef) bool { terminating++; return true }
	podsAsked := 0
	cfg.Pods = func(string) (*corev1.Pod, bool) { podsAsked++; return nil, false }
	unbound := 0
	log := slog.Default()
	store := nodevolume.NewStore()
	files := &nodevolume.Files{KubeletRoot: "/files"}
	metrics, events := &wiredMetrics{}, &podevents.Recorder{}
	d := mounterDeps{store: store, files: files, metrics: metrics, events: events, log: log, unbound: func(string) { unbound++ }}

	f := filesConfig(cfg, log)
	if f.KubeletRoot != "/kubelet" || f.MounterDir != "/shared/mounter" || f.UID != 1001 || f.GID != 2002 || string(f.CABundle) != "ca" || f.Log != log {
		t.Errorf("volume files got %+v", f)
	}
	if f := filesConfig(Config{KubeletRoot: "/kubelet"}, log); f.MounterDir != "" {
		t.Errorf("without the shared mode the files got a mounter directory %q", f.MounterDir)
	}

	sc := sidecarConfig(cfg, d)
	if sc.UID != 1001 || sc.GID != 2002 || sc.UnmountBusyWait != 3*time.Second || sc.StateDir != "/state" ||
		sc.Store != store || sc.Files != files || sc.Log != log || sc.Metrics != metrics || sc.Events != events {
		t.Errorf("the sidecar mounter got %+v", sc)
	}
	if sc.OnTerminating == nil {
		t.Error("the sidecar mounter got no OnTerminating")
	} else if sc.OnTerminating(PodRef{}); terminating != 1 {
		t.Error("the sidecar mounter's OnTerminating is not the node service's")
	}
	if sc.Pods == nil {
		t.Fatal("the sidecar mounter got no pod lookup")
	}
	sc.Pods("uid")
	if podsAsked != 1 {
		t.Errorf("the sidecar mounter's pod lookup is not the node service's (%d)", podsAsked)
	}
	podsAsked = 0

	sh := sharedConfig(cfg, d)
	if sh.Dir != "/shared" || sh.MounterTmpPath != "/mounter-tmp" || sh.KubeletRoot != "/kubelet" || sh.UID != 1001 || sh.GID != 2002 ||
		sh.UnmountBusyWait != 3*time.Second || sh.Linger != 4*time.Second || sh.OfferWait != 5*time.Second ||
		!reflect.DeepEqual(sh.ADC, credentials.SharedADC{"adc-ns"}) || sh.Store != store || sh.Files != files || sh.Log != log ||
		sh.Metrics != metrics || sh.Events != events {
		t.Errorf("the shared mounter got %+v", sh)
	}
	if sh.Credentials.Provider != "shared-provider" {
		t.Errorf("the shared mounter's credentials read with provider %q, want the shared one", sh.Credentials.Provider)
	}
	if sh.Pods == nil || sh.Unbound == nil {
		t.Fatal("the shared mounter got no pod lookup or no Unbound")
	}
	sh.Pods("uid")
	sh.Unbound("/target")
	if podsAsked != 1 || unbound != 1 {
		t.Errorf("the shared mounter's pod lookup / Unbound are not the node service's (%d, %d)", podsAsked, unbound)
	}
}
