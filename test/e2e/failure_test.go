package e2e

// The lifecycle under failure: every way a pod ends other than a clean exit. Each test
// checks the bytes in the bucket, not only the pod's phase, and names the item of
// docs/lifecycle.md ("Ways a pod ends") it proves.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// needRoot fails (never skips: a skipped proof is a hole in CI) when the test cannot act on
// the node's processes.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test acts on the node's processes and must run as root on the node (hack/e2e.sh does)")
	}
}

// gcsfusePID waits for the one gcsfuse process serving bucket on this host.
func gcsfusePID(t *testing.T, bucket string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pids := testenv.GcsfusePIDs(func(args []string) bool { return len(args) >= 2 && args[len(args)-2] == bucket })
		if len(pids) == 1 {
			return pids[0]
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no single gcsfuse process for bucket %s on this host (is the test running on the node?)", bucket)
	return 0
}

// procsNamed lists the pids of the processes whose program is named name.
func procsNamed(name string) []int {
	return testenv.ProcessPIDs(func(args []string) bool { return filepath.Base(args[0]) == name })
}

// onPrimaryNode keeps the processes of pids that run in the primary node: every process of
// hack/'s nodes shows in this machine's /proc, each node's under its own hack/nodeinit
// (started with -hostname <its name>), whose descendants they are, containers included
// (their PID namespaces are nested in the node's). All of pids when no such init runs (a
// cluster not of hack/).
func onPrimaryNode(t *testing.T, pids []int) []int {
	t.Helper()
	inits := testenv.ProcessPIDs(func(args []string) bool {
		return filepath.Base(args[0]) == "nodeinit" && slices.Contains(args, primaryNode)
	})
	if len(inits) == 0 {
		return pids
	}
	var kept []int
	for _, pid := range pids {
		// Up the parents to the node's init or this machine's PID 1; bounded.
		for p, depth := pid, 0; p > 1 && depth < 64; p, depth = parentPID(p), depth+1 {
			if p == inits[0] {
				kept = append(kept, pid)
				break
			}
		}
	}
	return kept
}

// parentPID is the PPid of a process (0 when gone).
func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func appRunning(p *corev1.Pod) bool {
	st := containerStatus(p, appContainer)
	return st != nil && st.State.Running != nil
}

// sidecarTermination is the sidecar's last termination (current or previous run).
func sidecarTermination(p *corev1.Pod) *corev1.ContainerStateTerminated {
	st := containerStatus(p, contract.SidecarContainerName)
	if st == nil {
		return nil
	}
	if st.State.Terminated != nil {
		return st.State.Terminated
	}
	return st.LastTerminationState.Terminated
}

// TestOneVolumeFails (item 1): two volumes; the gcsfuse of one is SIGKILLed while the app
// writes to the other. The healthy volume keeps serving until the app is done (its object is
// complete), the failed one is reported at once (Event naming volume and bucket), and the
// sidecar ends non-zero at the usual trigger.
func TestOneVolumeFails(t *testing.T) {
	parallel(t)
	needRoot(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		dead, live := newBucket(t), newBucket(t)
		name := podName(t, "")
		const size = 8 * mib
		vols := []volume{{"doomed", dead, "/doomed"}, {"healthy", live, "/healthy"}}
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(10)), volumes: vols,
			// 128 chunks, 60 ms apart: ~8 s of writing.
			args: []string{"write", "-dir", "/healthy", "-name", "b.bin", "-bytes", strconv.Itoa(size), "-chunk-delay", "60ms"},
		})
		waitPod(t, name, startWithin, "running its app", appRunning)
		pid := gcsfusePID(t, dead)
		time.Sleep(1500 * time.Millisecond) // mid-file on the healthy volume
		killed := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		e := waitEvent(t, name, 30*time.Second, regexp.MustCompile(`^`+contract.EventGcsfuseExited+`$`), "doomed", dead)
		record(t, "gcsfuse killed -> Event", killed, time.Now())
		t.Logf("event: %s: %s", e.Reason, e.Message)
		p := waitPod(t, name, terminalWithin, "terminal", terminal)
		app := containerStatus(p, appContainer)
		if app == nil || app.State.Terminated == nil || app.State.Terminated.ExitCode != 0 {
			t.Fatalf("the app writing the healthy volume failed:\n%s\napp log: %s\n%s", describe(p), logs(name, appContainer), podEvents(name))
		}
		expectObject(t, live, "b.bin", size)
		term := sidecarTermination(p)
		if term == nil || term.ExitCode == 0 {
			t.Fatalf("sidecar ended with code 0 (or not at all) although a volume failed:\n%s", describe(p))
		}
		if !strings.Contains(term.Message, "doomed") {
			t.Errorf("sidecar termination message %q does not name the failed volume", term.Message)
		}
	})
}

// TestSidecarRestarted (item 1): the sidecar container itself is killed and restarted by
// the kubelet (native: restartPolicy Always; legacy: a pod with restartPolicy OnFailure).
// The restarted sidecar must not crash-loop: it reports the volume that died with its
// predecessor and stays up until the workload is done. A legacy sidecar under OnFailure
// that ends non-zero is restarted once more and, finding the exit file, ends 0: otherwise
// the pod would never complete.
func TestSidecarRestarted(t *testing.T) {
	parallel(t)
	needRoot(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		restart := corev1.RestartPolicyNever
		if mode == contract.ModeLegacy {
			restart = corev1.RestartPolicyOnFailure
		}
		createPod(t, name, podOpts{
			mode: mode, restart: restart, grace: ptr(int64(10)),
			volumes: []volume{{"vol-lost", bucket, mountPath}},
			args:    []string{"sleep", "-for", "20s"},
		})
		waitPod(t, name, startWithin, "running its app", appRunning)
		sidecar := parentPID(gcsfusePID(t, bucket))
		if sidecar <= 1 {
			t.Fatalf("no sidecar parent for the gcsfuse of %s", bucket)
		}
		if err := syscall.Kill(sidecar, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitPod(t, name, 60*time.Second, "with a restarted sidecar", func(p *corev1.Pod) bool {
			st := containerStatus(p, contract.SidecarContainerName)
			return st != nil && st.RestartCount >= 1 && st.State.Running != nil
		})
		time.Sleep(5 * time.Second) // a crash loop would show within this
		p := waitPod(t, name, 5*time.Second, "readable", func(p *corev1.Pod) bool { return true })
		st := containerStatus(p, contract.SidecarContainerName)
		if st.RestartCount != 1 || st.State.Running == nil {
			t.Fatalf("restarted sidecar is not up (crash loop?):\n%s\n%s", describe(p), podEvents(name))
		}
		if l := logs(name, contract.SidecarContainerName); !strings.Contains(l, "vol-lost") {
			t.Errorf("restarted sidecar's log does not report the volume:\n%s", l)
		}
		// The node plugin mounted the dead target again for the restarted sidecar
		// (sidecarmounter's revive.go): the report a user sees is that Event. The app's
		// container bound the dead mount before and would see ENOTCONN; this one does not
		// use it.
		e := waitEvent(t, name, 60*time.Second, regexp.MustCompile(`^`+contract.EventVolumeRemounted+`$`), "vol-lost")
		t.Logf("event: %s: %s", e.Reason, e.Message)
		p = waitPod(t, name, terminalWithin, "terminal", terminal)
		if p.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("pod %s: the app succeeded, a lost volume it did not use must not fail it or hold it\n%s", p.Status.Phase, describe(p))
		}
	})
}

// TestSidecarKilledBeforeTheAppStarts (issue 40, the chaos soak's hang): the sidecar is
// SIGKILLed after its volume was published and before the container that uses it is
// created. The dead mount answers ENOTCONN even to containerd's stat of the mount point, so
// before the node plugin mounted such a target again the container could never be created
// and the pod hung in CreateContainerError for ever.
//   - native: an init container after the sidecar waits 15 s without the volume; the
//     kubelet restarts the sidecar, which takes the volume mounted again: the app writes
//     its whole object and the pod succeeds, with a VolumeRemounted Event.
//   - legacy, restartPolicy Never: the app's 15 s postStart hook holds back the writer
//     after it; the sidecar is not restarted, so the volume answers I/O errors: the writer
//     fails and so does the pod, with a VolumeLost Event.
func TestSidecarKilledBeforeTheAppStarts(t *testing.T) {
	parallel(t)
	needRoot(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		vols := []volume{{"vol-revived", bucket, mountPath}}
		const size = 2 * mib
		write := []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(size)}
		o := podOpts{mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(10)), volumes: vols}
		holder := "hold"
		const hookSleep = "15250ms" // this test's alone
		if mode == contract.ModeNative {
			o.init = []corev1.Container{workloadContainer(holder, nil, "sleep", "-for", "15s")}
			o.args = write
		} else {
			// Longer than its hook: a container that ends ends its postStart hook too. The
			// kubelet shows the app running only once the hook is over, so the hook's
			// process (its unique duration) is what says the writer is held back.
			o.args = []string{"sleep", "-for", "25s"}
			o.appLifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"/workload", "sleep", "-for", hookSleep}}}}
			o.extra = []corev1.Container{workloadContainer("writer", vols, write...)}
		}
		createPod(t, name, o)
		sidecar := parentPID(gcsfusePID(t, bucket))
		if sidecar <= 1 {
			t.Fatalf("no sidecar parent for the gcsfuse of %s", bucket)
		}
		if mode == contract.ModeNative {
			waitPod(t, name, startWithin, holder+" running", func(p *corev1.Pod) bool {
				st := containerStatus(p, holder)
				return st != nil && st.State.Running != nil
			})
		} else {
			waitfor.Until(t, startWithin, "the app's postStart hook running", func() bool {
				return len(testenv.ProcessPIDs(func(args []string) bool {
					return len(args) == 4 && filepath.Base(args[0]) == "workload" && args[1] == "sleep" && args[3] == hookSleep
				})) > 0
			})
		}
		if err := syscall.Kill(sidecar, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		p := waitPod(t, name, terminalWithin, "terminal", terminal)
		record(t, "sidecar killed -> pod terminal", killed, time.Now())
		if mode == contract.ModeNative {
			if p.Status.Phase != corev1.PodSucceeded {
				t.Fatalf("pod %s: the restarted sidecar serves the volume mounted again; the app must succeed\n%s\n%s", p.Status.Phase, describe(p), podEvents(name))
			}
			if st := containerStatus(p, contract.SidecarContainerName); st == nil || st.RestartCount < 1 {
				t.Errorf("the sidecar was not restarted\n%s", describe(p))
			}
			expectObject(t, bucket, "out.bin", size)
			e := waitEvent(t, name, 30*time.Second, regexp.MustCompile(`^`+contract.EventVolumeRemounted+`$`), "vol-revived")
			t.Logf("event: %s: %s", e.Reason, e.Message)
			return
		}
		if p.Status.Phase != corev1.PodFailed {
			t.Fatalf("pod %s: its sidecar is not restarted and the writer cannot write; the pod must fail\n%s\n%s", p.Status.Phase, describe(p), podEvents(name))
		}
		if st := containerStatus(p, "writer"); st == nil || st.State.Terminated == nil || st.State.Terminated.ExitCode == 0 {
			t.Errorf("the writer did not fail\n%s", describe(p))
		}
		e := waitEvent(t, name, 30*time.Second, regexp.MustCompile(`^`+contract.EventVolumeLost+`$`), "vol-revived", "restartPolicy: Never")
		t.Logf("event: %s: %s", e.Reason, e.Message)
	})
}

// TestDeleteDuringInitWrite (item 2): native mode; the pod is deleted while an init container
// placed after the sidecar is still writing. The kubelet SIGTERMs that init container and
// the sidecar together; the sidecar must keep serving until the init container has exited.
func TestDeleteDuringInitWrite(t *testing.T) {
	parallel(t)
	needNative(t)
	bucket := newBucket(t)
	name := podName(t, "")
	const size = 6 * mib
	vols := []volume{{"bucket", bucket, mountPath}}
	// 96 chunks, 100 ms apart: ~9.6 s; it finishes the file on SIGTERM.
	init := workloadContainer("seed", vols, "write", "-dir", mountPath, "-name", "seed.bin", "-bytes", strconv.Itoa(size),
		"-chunk-delay", "100ms", "-finish-on-term", "-marker", "seed.started")
	createPod(t, name, podOpts{
		mode: contract.ModeNative, restart: corev1.RestartPolicyNever, grace: ptr(int64(30)), volumes: vols,
		init: []corev1.Container{init}, args: []string{"sleep", "-for", "1s"},
	})
	tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	waitMarker(t, bucket, "seed.started", startWithin)
	time.Sleep(2 * time.Second) // mid-file
	deleted, gone := deletePod(t, name, nil, 60*time.Second)
	expectObject(t, bucket, "seed.bin", size)
	record(t, "delete during init write -> pod gone", deleted, gone)
	// The sidecar served the init container to its end, then ended by itself, not held to
	// the grace period's end.
	checkDeletion(t, contract.ModeNative, tr, name, deleted, gone, 30)
	if p := tr.last(name); p != nil {
		seed, sc := containerStatus(p, "seed"), containerStatus(p, contract.SidecarContainerName)
		if seed != nil && sc != nil && seed.State.Terminated != nil && sc.State.Terminated != nil &&
			sc.State.Terminated.FinishedAt.Before(&seed.State.Terminated.FinishedAt) {
			t.Fatalf("the sidecar ended before the init container it served\n%s", describe(p))
		}
	}
}

// deletePod deletes the pod (with grace seconds, if not nil) and waits until it is gone, at
// most d; it returns when the delete was sent and when the pod was seen gone.
func deletePod(t *testing.T, name string, grace *int64, d time.Duration) (deleted, gone time.Time) {
	t.Helper()
	return deletePodIn(t, ns, name, grace, d)
}

// deletePodIn is deletePod for a pod in namespace.
func deletePodIn(t *testing.T, namespace, name string, grace *int64, d time.Duration) (deleted, gone time.Time) {
	t.Helper()
	deleted = time.Now()
	if err := cs.CoreV1().Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: grace}); err != nil {
		t.Fatal(err)
	}
	waitGoneIn(t, namespace, name, d)
	return deleted, time.Now()
}

// waitMarker waits until an object exists in the bucket.
func waitMarker(t *testing.T, bucket, name string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, ok := objects(t, bucket)[name]; ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("bucket %s: no %s after %s", bucket, name, d)
}

// TestDeleteGracePeriod (item 3): kubectl delete --grace-period overrides the spec's grace.
// Longer: spec 10 s, delete with 40 s, the app needs ~15 s after SIGTERM: the volume must
// serve it to the end. Shorter: spec 60 s, delete with 3 s: the pod is gone in about 3 s,
// not held for the spec's 60 s.
func TestDeleteGracePeriod(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		t.Run("longer", func(t *testing.T) {
			t.Parallel()
			bucket := newBucket(t)
			name := podName(t, "")
			const size = 12 * mib // 192 chunks, 100 ms apart: ~19 s
			createPod(t, name, podOpts{
				mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(10)),
				volumes: []volume{{"bucket", bucket, mountPath}},
				args: []string{"write", "-dir", mountPath, "-name", "long.bin", "-bytes", strconv.Itoa(size),
					"-chunk-delay", "100ms", "-finish-on-term", "-marker", "long.started"},
			})
			tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			waitMarker(t, bucket, "long.started", startWithin)
			time.Sleep(2 * time.Second)
			deleted, gone := deletePod(t, name, ptr(int64(40)), 60*time.Second)
			expectObject(t, bucket, "long.bin", size)
			// The sidecar, told when the app is gone, is not started again by the kubelet.
			if !tr.when(name, "restarted:"+contract.SidecarContainerName).IsZero() {
				t.Errorf("the kubelet restarted the sidecar of the deleted pod")
			}
			record(t, "delete --grace-period=40 (spec 10) -> pod gone", deleted, gone)
		})
		t.Run("shorter", func(t *testing.T) {
			t.Parallel()
			bucket := newBucket(t)
			name := podName(t, "")
			createPod(t, name, podOpts{
				mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(60)),
				volumes: []volume{{"bucket", bucket, mountPath}},
				args: []string{"write", "-dir", mountPath, "-name", "short.bin", "-bytes", strconv.Itoa(12 * mib),
					"-chunk-delay", "100ms", "-finish-on-term", "-marker", "short.started"},
			})
			waitMarker(t, bucket, "short.started", startWithin)
			deleted, gone := deletePod(t, name, ptr(int64(3)), 30*time.Second)
			record(t, "delete --grace-period=3 (spec 60) -> pod gone", deleted, gone)
			if took := gone.Sub(deleted); took > 12*time.Second {
				t.Fatalf("pod took %s to go away with --grace-period=3", took)
			}
		})
	})
}

// TestDeadlineExceeded (item 8): activeDeadlineSeconds stops the pod without a deletion (as
// do evictions and node shutdown). The sidecar must end right after the app, not wait for
// most of the grace period; the file being written is finished.
func TestDeadlineExceeded(t *testing.T) {
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		const size = 128 << 10
		tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(30)), deadline: ptr(int64(8)),
			volumes: []volume{{"bucket", bucket, mountPath}},
			args:    []string{"loop", "-dir", mountPath, "-prefix", "part", "-bytes", strconv.Itoa(size), "-every", "300ms"},
		})
		p := waitPod(t, name, 90*time.Second, "terminal", terminal)
		failed := tr.when(name, "phase:Failed")
		if p.Status.Phase != corev1.PodFailed {
			t.Fatalf("pod %s, want Failed (DeadlineExceeded)\n%s", p.Status.Phase, describe(p))
		}
		if n := partFiles(t, bucket, "part", size); n < 2 {
			t.Fatalf("only %d complete files", n)
		}
		app := containerStatus(p, appContainer).State.Terminated
		side := sidecarTermination(p)
		if app == nil || side == nil {
			t.Fatalf("no terminated states:\n%s", describe(p))
		}
		lag := side.FinishedAt.Sub(app.FinishedAt.Time)
		t.Logf("app finished %s, sidecar finished %s (lag %s, 1 s precision), pod Failed seen %s after creation",
			app.FinishedAt.Format(time.TimeOnly), side.FinishedAt.Format(time.TimeOnly), lag, failed.Sub(p.CreationTimestamp.Time).Round(100*time.Millisecond))
		record(t, "app exit (deadline) -> pod Failed", appExit(t, name, appContainer), failed)
		// The kubelet's timestamps have 1 s precision: "within 1 s" shows as at most 2 s.
		if lag > 2*time.Second {
			t.Fatalf("sidecar ended %s after the app (deadline kill): it waited for its drain deadline", lag)
		}
	})
}

// TestEarlyDelete (item 4): the pod is deleted right after its app started writing, before
// its container IDs may have reached the API status. No decision may be taken from that
// absent status: the app's file must be complete.
func TestEarlyDelete(t *testing.T) {
	parallel(t)
	modes(t, func(t *testing.T, mode string) {
		t.Parallel()
		bucket := newBucket(t)
		name := podName(t, "")
		const size = 2 * mib // 32 chunks, 100 ms apart: ~3 s
		createPod(t, name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, grace: ptr(int64(30)),
			volumes: []volume{{"bucket", bucket, mountPath}},
			args: []string{"write", "-dir", mountPath, "-name", "early.bin", "-bytes", strconv.Itoa(size),
				"-chunk-delay", "100ms", "-finish-on-term", "-marker", "early.started"},
		})
		waitMarker(t, bucket, "early.started", startWithin)
		deleted, gone := deletePod(t, name, nil, 60*time.Second)
		record(t, "early delete -> pod gone", deleted, gone)
		expectObject(t, bucket, "early.bin", size)
	})
}

// TestLegacyInitContainerRefused (item 7): a legacy sidecar starts after the init containers,
// so an init container that mounts a gcsfuse volume would wait forever. The webhook refuses
// the pod at admission with a message that says why.
func TestLegacyInitContainerRefused(t *testing.T) {
	parallel(t)
	bucket := newBucket(t)
	name := podName(t, "")
	vols := []volume{{"bucket", bucket, mountPath}}
	ann, spec := podTemplate(podOpts{
		mode: contract.ModeLegacy, restart: corev1.RestartPolicyNever, volumes: vols,
		init: []corev1.Container{workloadContainer("reader", vols, "sleep", "-for", "1s")},
		args: []string{"sleep", "-for", "1s"},
	})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann}, Spec: spec}
	_, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("pod admitted: it would stay Pending forever")
	}
	if !strings.Contains(err.Error(), "reader") || !strings.Contains(err.Error(), "init container") {
		t.Fatalf("refusal does not name the init container: %v", err)
	}
	t.Logf("refused: %v", err)
}

// TestUnclaimedOfferRestart (item 6): the node plugin restarts while an offer is not yet
// taken (a legacy sidecar starts only after the init containers, here one that sleeps). The
// new node plugin offers the volume again, with the right owner from the first moment, and
// the sidecar takes it: the app writes its object.
func TestUnclaimedOfferRestart(t *testing.T) {
	bucket := newBucket(t)
	name := podName(t, "")
	vols := []volume{{"bucket", bucket, mountPath}}
	createPod(t, name, podOpts{
		mode: contract.ModeLegacy, restart: corev1.RestartPolicyNever, volumes: vols,
		init: []corev1.Container{workloadContainer("wait", nil, "sleep", "-for", "15s")},
		args: []string{"write", "-dir", mountPath, "-name", "after.bin", "-bytes", strconv.Itoa(mib)},
	})
	waitPod(t, name, startWithin, "in its init container", func(p *corev1.Pod) bool {
		st := containerStatus(p, "wait")
		return st != nil && st.State.Running != nil
	})
	restartNodePlugin(t)
	p := waitPod(t, name, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s\n%s\n%s\nsidecar log: %s", p.Status.Phase, describe(p), podEvents(name), logs(name, contract.SidecarContainerName))
	}
	expectObject(t, bucket, "after.bin", mib)
}

// restartNodePlugin deletes the node plugin pod and waits for its replacement to be ready.
func restartNodePlugin(t *testing.T) {
	t.Helper()
	old := nodePluginPod(t).Name
	if err := cs.CoreV1().Pods("gcsfuse-csi").Delete(context.Background(), old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNewNodePlugin(t, old)
}

// upgradeNodePlugin rolls the node plugin with `helm upgrade` (the release's values, plus a
// pod annotation that changes its template) and waits for the new pod.
func upgradeNodePlugin(t *testing.T) {
	t.Helper()
	old := nodePluginPod(t).Name
	out, err := exec.Command(helmBin, "upgrade", "gcsfuse-csi", helmChart, "--namespace", "gcsfuse-csi",
		"--kubeconfig", suite.Kubeconfig, "--reuse-values",
		"--set-string", "node.podAnnotations.e2e-upgraded="+strconv.FormatInt(time.Now().UnixNano(), 10)).CombinedOutput()
	if err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	waitNewNodePlugin(t, old)
}

// nodePluginPod is the node plugin's pod on the primary node.
func nodePluginPod(t *testing.T) corev1.Pod {
	t.Helper()
	return driverPod(t, "gcsfuse-csi-node")
}

// waitNewNodePlugin waits until a node plugin pod other than old is ready.
func waitNewNodePlugin(t *testing.T, old string) {
	t.Helper()
	waitNewDriverPod(t, "gcsfuse-csi-node", old)
}

// driverPod is the one pod labelled app=<app> in the driver's namespace on the primary node
// (a DaemonSet's).
func driverPod(t *testing.T, app string) corev1.Pod {
	t.Helper()
	return driverPodOn(t, app, primaryNode)
}

// driverPodOn is the one pod labelled app=<app> on node.
func driverPodOn(t *testing.T, app, node string) corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := cs.CoreV1().Pods(driverNamespace).List(ctx, onNodeSel("app="+app, node))
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("%s pods on %s: %v %v", app, node, pods, err)
	}
	return pods.Items[0]
}

// waitNewDriverPod waits until the one pod labelled app=<app> on the primary node is another
// than old, and ready.
func waitNewDriverPod(t *testing.T, app, old string) {
	t.Helper()
	ctx := context.Background()
	sel := onPrimary("app=" + app)
	deadline := time.Now().Add(90 * time.Second)
	for {
		pods, err := cs.CoreV1().Pods("gcsfuse-csi").List(ctx, sel)
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Name != old &&
			len(pods.Items[0].Status.ContainerStatuses) == 1 && pods.Items[0].Status.ContainerStatuses[0].Ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new %s pod ready after %s", app, 90*time.Second)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// onPrimary lists the pods of a label selector on the primary node.
func onPrimary(selector string) metav1.ListOptions {
	return onNodeSel(selector, primaryNode)
}

// onNodeSel lists the pods of a label selector on node.
func onNodeSel(selector, node string) metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: selector, FieldSelector: "spec.nodeName=" + node}
}

// TestAPIServerOutage (item 10): the API server stops answering (SIGSTOP) for longer than
// the node plugin's initial sync timeout while pods start and end, and the node plugin is
// restarted in the middle of it. The node plugin must keep serving CSI calls (the pods'
// volumes are published while the API is away), must not crash-loop, and the pods must end
// correctly with every byte once the API is back.
func TestAPIServerOutage(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("stops the API server")
	}
	apis := procsNamed("kube-apiserver")
	if len(apis) != 1 {
		t.Fatalf("kube-apiserver processes on this host: %v, want 1", apis)
	}
	type run struct{ bucket, name string }
	runs := map[string]run{}
	if !nativeOK {
		t.Run(contract.ModeNative, needNative)
	}
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		if mode == contract.ModeNative && !nativeOK {
			continue // skipped above, with the reason
		}
		r := run{newBucket(t), podName(t, mode)}
		runs[mode] = r
		createPod(t, r.name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever, noToken: true,
			volumes: []volume{{"bucket", r.bucket, mountPath}},
			// Starts while the API is away; ends ~5 s later, still during the outage.
			init: []corev1.Container{workloadContainer("wait", nil, "sleep", "-for", "5s")},
			args: []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(2 * mib), "-chunk-delay", "50ms"},
		})
	}
	for _, r := range runs {
		waitPod(t, r.name, 60*time.Second, "started by the kubelet", func(p *corev1.Pod) bool { return p.Status.StartTime != nil })
	}
	ctx := context.Background()
	np, err := cs.CoreV1().Pods("gcsfuse-csi").List(ctx, onPrimary("app=gcsfuse-csi-node"))
	if err != nil || len(np.Items) != 1 || len(np.Items[0].Status.ContainerStatuses) != 1 {
		t.Fatalf("node plugin pods: %v %v", np, err)
	}
	restartsBefore := np.Items[0].Status.ContainerStatuses[0].RestartCount
	plugins := onPrimaryNode(t, procsNamed("gcsfuse-csi-node"))
	if len(plugins) != 1 {
		t.Fatalf("node plugin processes: %v", plugins)
	}

	const outage = 40 * time.Second // longer than the 30 s initial sync timeout
	if err := syscall.Kill(apis[0], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(apis[0], syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	stopped := time.Now()
	// The node plugin dies during the outage (a crash, an OOM kill); the kubelet restarts
	// it without the API.
	if err := syscall.Kill(plugins[0], syscall.SIGKILL); err != nil {
		resume()
		t.Fatal(err)
	}
	time.Sleep(outage)
	resume()
	t.Logf("API server resumed after %s", time.Since(stopped).Round(time.Second))

	for mode, r := range runs {
		p := waitPod(t, r.name, terminalWithin, "terminal", terminal)
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s: pod %s\n%s\n%s", mode, p.Status.Phase, describe(p), podEvents(r.name))
			continue
		}
		expectObject(t, r.bucket, "out.bin", 2*mib)
	}
	np, err = cs.CoreV1().Pods("gcsfuse-csi").List(ctx, onPrimary("app=gcsfuse-csi-node"))
	if err != nil || len(np.Items) != 1 {
		t.Fatalf("node plugin pods: %v %v", np, err)
	}
	st := np.Items[0].Status.ContainerStatuses[0]
	if got := st.RestartCount - restartsBefore; got != 1 {
		t.Fatalf("node plugin restarted %d times during the outage, want 1 (our kill): it exited without the API\n%s", got, describe(&np.Items[0]))
	}
}
