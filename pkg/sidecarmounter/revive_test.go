package sidecarmounter

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fuseerr"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// sidecarPod is a running pod with our sidecar: native, or legacy under restartPolicy rp.
func sidecarPod(native bool, rp corev1.RestartPolicy) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec:   corev1.PodSpec{RestartPolicy: rp, Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	sc := corev1.Container{Name: contract.SidecarContainerName}
	if native {
		always := corev1.ContainerRestartPolicyAlways
		sc.RestartPolicy = &always
		p.Spec.InitContainers = []corev1.Container{sc}
	} else {
		p.Spec.Containers = append([]corev1.Container{sc}, p.Spec.Containers...)
	}
	return p
}

// Which dead targets are mounted again, and how: only for a pod that still runs and whose
// sidecar was not told to exit; offered when the kubelet restarts the sidecar, answered with
// I/O errors when it does not or after maxRevives.
func TestDecideRevive(t *testing.T) {
	native := sidecarPod(true, corev1.RestartPolicyNever)
	deleting := sidecarPod(true, corev1.RestartPolicyNever)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	done := sidecarPod(false, corev1.RestartPolicyOnFailure)
	done.Status.Phase = corev1.PodSucceeded
	noSidecar := sidecarPod(true, corev1.RestartPolicyNever)
	noSidecar.Spec.InitContainers = nil
	workloadDone := sidecarPod(true, corev1.RestartPolicyNever)
	workloadDone.Status.Phase = corev1.PodRunning
	workloadDone.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	for _, c := range []struct {
		name     string
		pod      *corev1.Pod
		known    bool
		exitFile bool
		revived  int
		depth    int
		want     reviveAction
		why      string
	}{
		{"native", native, true, false, 0, 1, reviveOffer, "restarts"},
		{"native, revived twice", native, true, false, maxRevives - 1, 1, reviveOffer, "restarts"},
		{"native, revived maxRevives times", native, true, false, maxRevives, 1, reviveEIO, "3 times"},
		{"legacy OnFailure", sidecarPod(false, corev1.RestartPolicyOnFailure), true, false, 0, 1, reviveOffer, "restarts"},
		{"legacy Always", sidecarPod(false, corev1.RestartPolicyAlways), true, false, 0, 1, reviveOffer, "restarts"},
		{"legacy Never", sidecarPod(false, corev1.RestartPolicyNever), true, false, 0, 1, reviveEIO, "restartPolicy: Never"},
		{"unknown pod", nil, false, false, 0, 1, reviveNone, "not known"},
		{"deleting", deleting, true, false, 0, 1, reviveNone, "deleted"},
		{"ended", done, true, false, 0, 1, reviveNone, "ended"},
		{"told to exit", native, true, true, 0, 1, reviveNone, "told to exit"},
		{"no sidecar", noSidecar, true, false, 0, 1, reviveNone, "no gcsfuse-sidecar"},
		{"workload done (the API's view)", workloadDone, true, false, 0, 1, reviveNone, "the workload is done"},
		{"stacked deep", native, true, false, 0, maxRecoverDepth, reviveEIO, "stacked"},
	} {
		got, why := decideRevive(c.pod, c.known, c.exitFile, c.revived, c.depth)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: %d (%s), want %d (%q)", c.name, got, why, c.want, c.why)
		}
	}
}

// reviveFixture publishes volume "data" of pod uid-1 for a mounter whose pod lookup answers
// pod, and returns the mounter, the target, the pod's emptyDir and the Events.
func reviveFixture(t *testing.T, pod *corev1.Pod) (*Mounter, string, string, *podevents.Recorder) {
	t.Helper()
	return reviveFixtureWith(t, pod, nil)
}

// reviveFixtureWith is reviveFixture over store (nil: a new one).
func reviveFixtureWith(t *testing.T, pod *corev1.Pod, store nodevolume.Store) (*Mounter, string, string, *podevents.Recorder) {
	t.Helper()
	needs.RootAndFUSE(t)
	rec := &podevents.Recorder{}
	m, tmp, target := podMounter(t, Config{Store: store, StateDir: filepath.Join(t.TempDir(), "offers"), UID: os.Getuid(), GID: os.Getgid(), Events: rec,
		Pods: func(uid string) (*corev1.Pod, bool) { return pod, pod != nil && string(pod.UID) == uid }})
	tp := target("data")
	if err := os.MkdirAll(filepath.Dir(tp), 0o750); err != nil {
		t.Fatal(err)
	}
	ref := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	req := &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: tp}
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Pod: ref,
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"},
		Opts:   &mountopts.Volume{}, Creds: testPlan("tok")}
	if err := m.Publish(context.Background(), req, r, m.cfg.Log); err != nil {
		t.Fatal(err)
	}
	m.cfg.Store.Remember(tp, nodevolume.Publication{VolumeID: "vol-1", Volume: r.Volume})
	t.Cleanup(func() {
		if err := m.Unpublish(context.Background(), tp, m.cfg.Log); err != nil {
			t.Errorf("unpublish: %v", err)
		}
		if layers := mountLayers(t, tp); layers != 0 {
			t.Errorf("%d mounts left at the target after the unpublish", layers)
		}
	})
	return m, tp, tmp, rec
}

// takeVolume connects to the volume's offer as the sidecar does and takes its descriptor.
func takeVolume(t *testing.T, tmp string) (*net.UnixConn, *os.File) {
	t.Helper()
	dir, err := podpath.OpenDir(podfiles.At(tmp).HandoffDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	var conn *net.UnixConn
	waitfor.Until(t, 10*time.Second, "the volume's offer", func() bool {
		conn, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: podpath.ProcPath(dir, podfiles.HandoffSocketName("data")), Net: "unix"})
		return err == nil
	})
	_, fuse, err := handoff.RecvVolume(conn)
	if err != nil {
		t.Fatal(err)
	}
	return conn, fuse
}

// offerOf is the offer the store keeps for target (left there).
func offerOf(t *testing.T, m *Mounter, target string) *handoff.Offer {
	t.Helper()
	o := m.cfg.Store.TakeOffer(target)
	if o == nil {
		t.Fatal("no offer kept for the target")
	}
	m.cfg.Store.PutOffer(target, o)
	return o
}

// settled waits for an offer's goroutine to end: its OnStatusEnd (the revival, or the
// decision not to revive) runs before, so what it did is done.
func settled(t *testing.T, o *handoff.Offer) {
	t.Helper()
	select {
	case <-o.Done():
	case <-time.After(reviveTimeout + 5*time.Second):
		t.Fatal("the ended offer's goroutine did not end")
	}
}

// lockSpy is a store that says when a Begin was refused (another call held the target).
type lockSpy struct {
	nodevolume.Store
	refused chan struct{}
}

func (l *lockSpy) Begin(target string) (func(), error) {
	end, err := l.Store.Begin(target)
	if err != nil {
		select {
		case l.refused <- struct{}{}:
		default:
		}
	}
	return end, err
}

// mountLayers counts the mounts stacked at path.
func mountLayers(t *testing.T, path string) int {
	t.Helper()
	ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) { return m.Mountpoint != path, false })
	if err != nil {
		t.Fatal(err)
	}
	return len(ms)
}

// dies ends a taken volume as a SIGKILLed sidecar does: its descriptor and its status
// stream close without a word, and the mount answers ENOTCONN.
func dies(t *testing.T, conn *net.UnixConn, fuse *os.File) {
	t.Helper()
	fuse.Close()
	conn.Close()
}

// A native sidecar killed after taking its volume: the target is mounted again on top of
// the dead mount and offered to the restarted sidecar, which takes it and serves; the
// VolumeRemounted Event follows the take. A mount the sidecar serves again is not touched
// when its stream ends after a report of its end.
func TestSidecarKilledVolumeMountedAgainForItsRestart(t *testing.T) {
	m, tp, tmp, rec := reviveFixture(t, sidecarPod(true, corev1.RestartPolicyNever))
	conn, fuse := takeVolume(t, tmp)
	dies(t, conn, fuse)
	waitfor.Until(t, 15*time.Second, "the target mounted again on the dead mount", func() bool { return mountLayers(t, tp) == 2 })
	if rec.Count(contract.EventVolumeRemounted) != 0 {
		t.Error("VolumeRemounted before the restarted sidecar took the volume")
	}

	// The restarted sidecar takes the new connection and serves it.
	conn, fuse = takeVolume(t, tmp)
	defer conn.Close()
	f, err := fuseerr.Pollable(fuse)
	fuse.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	go func() { _ = fuseerr.Serve(f, 5*time.Second, nil) }()
	waitfor.Until(t, 10*time.Second, "the VolumeRemounted Event", func() bool { return rec.Count(contract.EventVolumeRemounted) == 1 })
	if e := rec.Events()[0]; !strings.Contains(e.Msg, "volume data (bucket bkt)") || !e.Warning {
		t.Errorf("event %+v", e)
	}
	if _, err := os.Stat(tp); err != nil {
		t.Errorf("stat of the target served again: %v", err) // what containerd does to create a container
	}

	// This sidecar stops its gcsfuse on purpose (told to exit) and says so, then ends: the
	// mount dies, and nothing is mounted again.
	o := offerOf(t, m, tp)
	if err := handoff.SendStatus(conn, &handoff.Status{State: handoff.StateStopping, Message: "exit file"}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	conn.Close()
	settled(t, o)
	if n := mountLayers(t, tp); n != 2 {
		t.Errorf("%d mounts after a stream that said it stopped on purpose, want 2", n)
	}
}

// A sidecar that reported its gcsfuse's end (it answers that mount itself, with I/O errors)
// and then ends is no death to revive.
func TestStreamEndAfterAReportedEndNotMountedAgain(t *testing.T) {
	m, tp, tmp, rec := reviveFixture(t, sidecarPod(true, corev1.RestartPolicyNever))
	conn, fuse := takeVolume(t, tmp)
	o := offerOf(t, m, tp)
	if err := handoff.SendStatus(conn, &handoff.Status{State: handoff.StateExited, Message: "gcsfuse died"}); err != nil {
		t.Fatal(err)
	}
	dies(t, conn, fuse)
	settled(t, o)
	if n := mountLayers(t, tp); n != 1 {
		t.Errorf("%d mounts after a stream that reported its end, want the dead one alone", n)
	}
	if rec.Count(contract.EventVolumeRemounted)+rec.Count(contract.EventVolumeLost) != 0 {
		t.Errorf("events %+v", rec.Events())
	}
}

// A sidecar that dies while the kubelet's republish (a fresh token) holds the target's lock
// still has its volume mounted again once the call is over.
func TestSidecarKilledDuringARepublish(t *testing.T) {
	spy := &lockSpy{Store: nodevolume.NewStore(), refused: make(chan struct{}, 1)}
	m, tp, tmp, _ := reviveFixtureWith(t, sidecarPod(true, corev1.RestartPolicyNever), spy)
	conn, fuse := takeVolume(t, tmp)
	end, err := m.cfg.Store.Begin(tp)
	if err != nil {
		t.Fatal(err)
	}
	dies(t, conn, fuse)
	select { // the revival found the target busy
	case <-spy.refused:
	case <-time.After(15 * time.Second):
		end()
		t.Fatal("the revival never tried the target's lock")
	}
	end()
	waitfor.Until(t, 15*time.Second, "the target mounted again after the call", func() bool { return mountLayers(t, tp) == 2 })
}

// A legacy sidecar of a restartPolicy: Never pod, killed after taking its volume, is not
// restarted: the target is mounted again and answered with I/O errors, so that the app's
// container is created (a stat of the target works) and fails on its first access, with a
// VolumeLost Event; never a hang in CreateContainerError.
func TestSidecarKilledNeverRestartedVolumeAnswersIOErrors(t *testing.T) {
	_, tp, tmp, rec := reviveFixture(t, sidecarPod(false, corev1.RestartPolicyNever))
	conn, fuse := takeVolume(t, tmp)
	dies(t, conn, fuse)
	waitfor.Until(t, 15*time.Second, "the VolumeLost Event", func() bool { return rec.Count(contract.EventVolumeLost) == 1 })
	if e := rec.Events()[0]; !strings.Contains(e.Msg, "restartPolicy: Never") || !e.Warning {
		t.Errorf("event %+v", e)
	}
	if _, err := os.Stat(tp); err != nil {
		t.Errorf("stat of the target: %v, want it to work", err)
	}
	if _, err := os.ReadDir(tp); !errors.Is(err, syscall.EIO) {
		t.Errorf("listing the target: %v, want EIO", err)
	}
	if n := mountLayers(t, tp); n != 2 {
		t.Errorf("%d mounts at the target, want the dead one and the new", n)
	}
}

// A sidecar that dies at every start gets maxRevives new connections; past them the target
// answers I/O errors.
func TestSidecarDyingAtEachStartIsRevivedABoundedNumberOfTimes(t *testing.T) {
	_, tp, tmp, rec := reviveFixture(t, sidecarPod(true, corev1.RestartPolicyNever))
	for i := 0; i <= maxRevives; i++ {
		conn, fuse := takeVolume(t, tmp)
		dies(t, conn, fuse)
		waitfor.Until(t, 15*time.Second, "the target mounted again", func() bool { return mountLayers(t, tp) == i+2 })
	}
	waitfor.Until(t, 10*time.Second, "the VolumeLost Event", func() bool { return rec.Count(contract.EventVolumeLost) == 1 })
	if rec.Count(contract.EventVolumeRemounted) != maxRevives {
		t.Errorf("%d VolumeRemounted Events, want %d", rec.Count(contract.EventVolumeRemounted), maxRevives)
	}
	if _, err := os.ReadDir(tp); !errors.Is(err, syscall.EIO) {
		t.Errorf("listing the target: %v, want EIO", err)
	}
}

// Nothing is mounted again for a pod that is being deleted, nor for a sidecar told to exit
// (its workload done), nor for a pod the node plugin does not know: the dead mount stays
// until the unpublish, which removes it.
func TestSidecarEndedNotMountedAgain(t *testing.T) {
	deleting := sidecarPod(true, corev1.RestartPolicyNever)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, c := range []struct {
		name     string
		pod      *corev1.Pod
		exitFile bool
	}{
		{"deleting", deleting, false},
		{"told to exit", sidecarPod(true, corev1.RestartPolicyNever), true},
		{"unknown pod", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, tp, tmp, rec := reviveFixture(t, c.pod)
			if c.exitFile {
				dir, err := podpath.OpenDir(tmp)
				if err != nil {
					t.Fatal(err)
				}
				err = podfiles.WriteIn(dir, podfiles.Reason{Rule: "test"})
				dir.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			conn, fuse := takeVolume(t, tmp)
			o := offerOf(t, m, tp)
			dies(t, conn, fuse)
			settled(t, o)
			if n := mountLayers(t, tp); n != 1 {
				t.Errorf("%d mounts at the target, want the dead one alone", n)
			}
			if n := len(rec.Events()); n != 0 {
				t.Errorf("Events %+v", rec.Events())
			}
		})
	}
}

// A legacy sidecar of a restartPolicy: Never pod that ends before taking its volume (its
// start cut by a containerd restart: StartError) never comes back: the offer would wait for
// ever and a container's creation would block on the unanswered mount (the pod Pending for
// ever). The node plugin withdraws it and answers the mount with I/O errors, on the same
// connection. A sidecar that is restarted (native) keeps its offer.
func TestSidecarEndedBeforeTakingItsVolume(t *testing.T) {
	t.Run("legacy Never", func(t *testing.T) {
		pod := sidecarPod(false, corev1.RestartPolicyNever)
		m, tp, _, rec := reviveFixture(t, pod)
		m.SidecarEnded(pod)
		if rec.Count(contract.EventVolumeLost) != 1 {
			t.Fatalf("events %+v, want one VolumeLost", rec.Events())
		}
		if _, err := os.Stat(tp); err != nil {
			t.Errorf("stat of the target: %v, want it to work", err)
		}
		if _, err := os.ReadDir(tp); !errors.Is(err, syscall.EIO) {
			t.Errorf("listing the target: %v, want EIO", err)
		}
		if n := mountLayers(t, tp); n != 1 {
			t.Errorf("%d mounts at the target, want its own alone (the same connection answered)", n)
		}
		if _, err := os.Stat(m.recordPathFor(tp, true)); err != nil {
			t.Errorf("the I/O-error record: %v", err)
		}
		m.SidecarEnded(pod) // the pod watch's next report: nothing more
		if rec.Count(contract.EventVolumeLost) != 1 {
			t.Errorf("events %+v after a second report", rec.Events())
		}
	})
	t.Run("native", func(t *testing.T) {
		pod := sidecarPod(true, corev1.RestartPolicyNever)
		m, _, tmp, rec := reviveFixture(t, pod)
		m.SidecarEnded(pod)
		if n := len(rec.Events()); n != 0 {
			t.Errorf("events %+v", rec.Events())
		}
		conn, fuse := takeVolume(t, tmp) // still offered to the restarted sidecar
		defer conn.Close()
		fuse.Close()
	})
}

// A sidecar that died while the node plugin was down left no stream to end: the restarted
// node plugin finds the dead mount at the kubelet's republish (which the kubelet repeats
// while it cannot set the volume up) and mounts it again for the restarted sidecar, once;
// the target is then its own (published), and a live one is left alone.
func TestDeadMountFoundAtARepublish(t *testing.T) {
	needs.RootAndFUSE(t)
	pod := sidecarPod(true, corev1.RestartPolicyNever)
	rec := &podevents.Recorder{}
	m, tmp, target := podMounter(t, Config{StateDir: filepath.Join(t.TempDir(), "offers"), UID: os.Getuid(), GID: os.Getgid(), Events: rec,
		Pods: func(uid string) (*corev1.Pod, bool) { return pod, string(pod.UID) == uid }})
	tp := target("data")
	deadMount(t, tp) // published by the previous node plugin, its sidecar dead since
	req := &csi.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: tp}
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Pod: nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"},
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}, Opts: &mountopts.Volume{}, Creds: testPlan("tok")}
	if _, err := m.Refresh(context.Background(), req, r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unpublish(context.Background(), tp, m.cfg.Log) })
	if n := mountLayers(t, tp); n != 2 {
		t.Fatalf("%d mounts at the target after the republish, want the new one on the dead one", n)
	}
	if _, ok := m.cfg.Store.Publication(tp); !ok {
		t.Error("the target mounted again is not remembered as published")
	}
	conn, fuse := takeVolume(t, tmp)
	defer conn.Close()
	fuse.Close()
	waitfor.Until(t, 5*time.Second, "the VolumeRemounted Event", func() bool { return rec.Count(contract.EventVolumeRemounted) == 1 })
}
