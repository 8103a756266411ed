package integration

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// rawVolume is the Volume the node plugin would offer for bucket in this environment.
func rawVolume(e *testenv.Env, volume, bucket string) handoff.Volume {
	return handoff.Volume{Version: handoff.Version, VolumeName: volume, Bucket: bucket, Endpoint: e.Emulator.Endpoint}
}

func startSidecar(t *testing.T, pod *testenv.Pod, o testenv.SidecarOptions) *testenv.Sidecar {
	t.Helper()
	o.Echo = echo(t)
	sc, err := pod.StartSidecarWith(o)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func waitReady(t *testing.T, sc *testenv.Sidecar, targets ...string) {
	t.Helper()
	for _, target := range targets {
		if _, err := testenv.WaitReady(target, 20*time.Second); err != nil {
			t.Fatalf("%s not ready: %v\nsidecar output:\n%s", target, err, sc.Output())
		}
	}
}

func requireRunning(t *testing.T, sc *testenv.Sidecar, what string) {
	t.Helper()
	select {
	case <-sc.Done():
		t.Fatalf("sidecar exited %s:\n%s", what, sc.Output())
	default:
	}
}

func writeTerminating(t *testing.T, pod *testenv.Pod, graceSeconds int64) {
	t.Helper()
	d, err := pod.OpenTmpDir()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := podfiles.WriteTerminating(d, podfiles.Terminating{GraceSeconds: graceSeconds, DeletionTimestamp: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func writeExitFile(t *testing.T, e *testenv.Env, pod *testenv.Pod) {
	t.Helper()
	if err := podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "test"}); err != nil {
		t.Fatal(err)
	}
}

// (a) One volume's gcsfuse is killed (an OOM kill) while the app streams into another
// volume: the other volume keeps serving and the app's object completes; the node plugin is
// told which volume and bucket died; the sidecar stays up until its usual trigger and then
// exits 1 with the reason.
func TestOneVolumeFailsOthersKeepServing(t *testing.T) {
	e := newEnv(t, "bkt-fail-a", "bkt-fail-b")
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	offerA, err := pod.OfferRaw(rawVolume(e, "vol-a", "bkt-fail-a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pod.Publish(ctx(t), "vol-b", "bkt-fail-b", "", false); err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, pod, testenv.SidecarOptions{Mode: contract.ModeNative, GraceSeconds: 30})
	waitReady(t, sc, pod.Target("vol-a"), pod.Target("vol-b"))
	pidsA := testenv.GcsfusePIDs(func(args []string) bool {
		return strings.Contains(strings.Join(args, " "), pod.TmpDir) && args[len(args)-2] == "bkt-fail-a"
	})
	if len(pidsA) != 1 {
		t.Fatalf("gcsfuse of vol-a: pids %v", pidsA)
	}

	// The app streams into vol-b from its own goroutine; vol-a's gcsfuse is killed mid-stream.
	f, err := os.Create(filepath.Join(pod.Target("vol-b"), "stream.bin"))
	if err != nil {
		t.Fatal(err)
	}
	var sent bytes.Buffer
	stop := make(chan struct{})
	streamed := make(chan error, 1)
	go func() { // owned by the test: ends when stop is closed or a write fails
		chunk := make([]byte, 64<<10)
		for {
			select {
			case <-stop:
				streamed <- f.Close()
				return
			default:
			}
			_, _ = rand.Read(chunk)
			if _, err := f.Write(chunk); err != nil {
				f.Close()
				streamed <- fmt.Errorf("write into vol-b after %d bytes: %w", sent.Len(), err)
				return
			}
			sent.Write(chunk)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := syscall.Kill(pidsA[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st, err := offerA.WaitStatus(handoff.StateExited, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vol-a", "bkt-fail-a", "gcsfuse died"} {
		if !strings.Contains(st.Message, want) {
			t.Errorf("exited status %q does not name %q", st.Message, want)
		}
	}
	time.Sleep(300 * time.Millisecond) // the app keeps streaming into the healthy volume
	close(stop)
	if err := <-streamed; err != nil {
		t.Fatalf("%v\n%s", err, sc.Output())
	}
	t.Logf("streamed %d bytes into vol-b across the kill of vol-a's gcsfuse", sent.Len())
	requireObject(t, "bkt-fail-b", "stream.bin", sent.Bytes())
	requireRunning(t, sc, "when another volume failed")
	if n := len(pod.GcsfusePIDs()); n != 1 {
		t.Fatalf("%d gcsfuse running, want vol-b's", n)
	}

	if err := sc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := sc.Wait(5 * time.Second)
	if err != nil || code != 1 {
		t.Fatalf("sidecar exit = %d, %v; want 1\n%s", code, err, sc.Output())
	}
	msg := pod.TerminationMessage()
	for _, want := range []string{"vol-a", "bkt-fail-a", "gcsfuse died"} {
		if !strings.Contains(msg, want) {
			t.Errorf("termination message %q does not name %q", msg, want)
		}
	}
	if !strings.Contains(sc.Output(), "level=ERROR") || !strings.Contains(sc.Output(), "bucket=bkt-fail-a") {
		t.Errorf("no error log line naming the bucket:\n%s", sc.Output())
	}
}

// (b) The sidecar container is killed and restarted (native restartPolicy Always, legacy
// under OnFailure/Always) after it took a volume: that volume's gcsfuse died with it. The new
// container does not exit or crash-loop: it reports the lost volume, serves a volume offered
// meanwhile, and exits 1 with the lost volume named when the workload is done.
func TestRestartedSidecarReportsLostVolume(t *testing.T) {
	e := newEnv(t, "bkt-lost", "bkt-late")
	pod, first, _ := mounted(t, e, contract.ModeLegacy, "bkt-lost")
	if _, err := os.Stat(podfiles.At(pod.TmpDir).TakenFile("data")); err != nil {
		t.Fatalf("no taken record for the volume: %v", err)
	}
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Wait(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitNoGcsfuse(t, pod, 3*time.Second)
	if err := pod.Publish(ctx(t), "late", "bkt-late", "", false); err != nil {
		t.Fatal(err)
	}

	second := startSidecar(t, pod, testenv.SidecarOptions{Mode: contract.ModeLegacy, GraceSeconds: 30})
	waitReady(t, second, pod.Target("late"))
	if err := os.WriteFile(filepath.Join(pod.Target("late"), "ok.txt"), []byte("served"), 0o644); err != nil {
		t.Fatal(err)
	}
	requireObject(t, "bkt-late", "ok.txt", []byte("served"))
	time.Sleep(500 * time.Millisecond)
	requireRunning(t, second, "after a restart with a lost volume")
	if out := second.Output(); !strings.Contains(out, "volume lost with the previous sidecar container") || !strings.Contains(out, "volume=data") {
		t.Fatalf("the restarted sidecar did not report the lost volume:\n%s", out)
	}

	writeExitFile(t, e, pod)
	code, err := second.Wait(5 * time.Second)
	if err != nil || code != 1 {
		t.Fatalf("restarted sidecar exit = %d, %v; want 1\n%s", code, err, second.Output())
	}
	msg := pod.TerminationMessage()
	if !strings.Contains(msg, "volume data") || !strings.Contains(msg, "bkt-lost") || !strings.Contains(msg, "previous container") {
		t.Fatalf("termination message %q does not name the lost volume", msg)
	}
	if strings.Contains(msg, "late") {
		t.Fatalf("termination message %q blames the healthy volume", msg)
	}
}

// (c) A draining legacy sidecar keeps serving until exactly the grace the kubelet applies:
// the deletion's (the node plugin's terminating file, written before or after SIGTERM) when
// known, else the pod spec's; never stopping early, so the app cannot lose a write.
func TestLegacyDrainFollowsTheGracePeriod(t *testing.T) {
	for _, tt := range []struct {
		name       string
		specGrace  int
		fileGrace  int64 // <0: no terminating file
		fileBefore bool  // written before SIGTERM (else 300 ms after)
		want       time.Duration
	}{
		{"spec grace without a terminating file", 2, -1, false, 2 * time.Second},
		{"longer deletion grace written after SIGTERM", 2, 4, false, 4 * time.Second},
		{"shorter deletion grace written before SIGTERM", 6, 2, true, 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "bkt-grace")
			pod, err := e.NewPod()
			if err != nil {
				t.Fatal(err)
			}
			if err := pod.Publish(ctx(t), "data", "bkt-grace", "", false); err != nil {
				t.Fatal(err)
			}
			sc := startSidecar(t, pod, testenv.SidecarOptions{Mode: contract.ModeLegacy, GraceSeconds: tt.specGrace})
			target := pod.Target("data")
			waitReady(t, sc, target)
			if tt.fileGrace >= 0 && tt.fileBefore {
				writeTerminating(t, pod, tt.fileGrace)
			}
			t0 := time.Now()
			if err := sc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if tt.fileGrace >= 0 && !tt.fileBefore {
				time.Sleep(300 * time.Millisecond)
				writeTerminating(t, pod, tt.fileGrace)
			}
			// Still serving shortly before the deadline: a write lands.
			time.Sleep(time.Until(t0.Add(tt.want - 700*time.Millisecond)))
			requireRunning(t, sc, "before the grace period ended")
			if err := os.WriteFile(filepath.Join(target, "late.txt"), []byte("late write"), 0o644); err != nil {
				t.Fatalf("write %s after SIGTERM: %v", time.Since(t0), err)
			}
			requireObject(t, "bkt-grace", "late.txt", []byte("late write"))
			code, err := sc.Wait(tt.want + 3*time.Second)
			took := sc.Exited.Sub(t0)
			if err != nil || code != 0 {
				t.Fatalf("sidecar exit = %d, %v\n%s", code, err, sc.Output())
			}
			t.Logf("drain ended %s after SIGTERM (grace %s)", took, tt.want)
			if took < tt.want-100*time.Millisecond || took > tt.want+time.Second {
				t.Fatalf("drain ended %s after SIGTERM, want %s (the kubelet's grace, no margin)", took, tt.want)
			}
		})
	}
}

// A SIGTERM with no volume serving has nothing to drain: even a legacy sidecar exits at once.
func TestSIGTERMWithNothingServingExitsAtOnce(t *testing.T) {
	e := newEnv(t)
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	sc := startSidecar(t, pod, testenv.SidecarOptions{Mode: contract.ModeLegacy, GraceSeconds: 30})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(sc.Output(), "sidecar ready") {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar not ready:\n%s", sc.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now()
	_ = sc.Signal(syscall.SIGTERM)
	if code, err := sc.Wait(2 * time.Second); err != nil || code != 0 {
		t.Fatalf("exit = %d, %v\n%s", code, err, sc.Output())
	}
	t.Logf("legacy sidecar with no volume: SIGTERM -> exit %s", sc.Exited.Sub(t0))
}

// (d) A native sidecar whose pod has regular init containers that mount a volume: a SIGTERM
// during the init phase (pod deleted while an init container writes) drains until the exit
// file, telling the node plugin; once the init phase is over (init-done file), or with the
// drain switched off, SIGTERM ends it at once as for any native sidecar.
func TestNativeDrainDuringInitPhase(t *testing.T) {
	t.Run("init phase: drain until the exit file", func(t *testing.T) {
		e := newEnv(t, "bkt-init")
		pod, err := e.NewPod()
		if err != nil {
			t.Fatal(err)
		}
		offer, err := pod.OfferRaw(rawVolume(e, "data", "bkt-init"))
		if err != nil {
			t.Fatal(err)
		}
		sc := startSidecar(t, pod, testenv.SidecarOptions{Mode: contract.ModeNative, GraceSeconds: 30, InitContainers: []string{"prep"}})
		target := pod.Target("data")
		waitReady(t, sc, target)
		f, err := os.Create(filepath.Join(target, "init-output.bin"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		want := randomBytes(t, 2<<20)
		if _, err := f.Write(want[:1<<20]); err != nil {
			t.Fatal(err)
		}
		if err := sc.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if _, err := offer.WaitStatus(handoff.StateTerminating, 3*time.Second); err != nil {
			t.Fatalf("node plugin not told of the drain: %v\n%s", err, sc.Output())
		}
		time.Sleep(300 * time.Millisecond) // the init container is still writing
		requireRunning(t, sc, "on SIGTERM during the init phase")
		if _, err := f.Write(want[1<<20:]); err != nil {
			t.Fatalf("write after SIGTERM: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close after SIGTERM: %v", err)
		}
		requireObject(t, "bkt-init", "init-output.bin", want)
		writeExitFile(t, e, pod)
		if code, err := sc.Wait(5 * time.Second); err != nil || code != 0 {
			t.Fatalf("sidecar exit = %d, %v\n%s", code, err, sc.Output())
		}
	})
	for _, tt := range []struct {
		name     string
		initDone bool
		args     []string
	}{
		{"init phase over: exit at once", true, nil},
		{"drain switched off: exit at once", false, []string{"--drain=false"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "bkt-init-done")
			pod, err := e.NewPod()
			if err != nil {
				t.Fatal(err)
			}
			if err := pod.Publish(ctx(t), "data", "bkt-init-done", "", false); err != nil {
				t.Fatal(err)
			}
			sc := startSidecar(t, pod, testenv.SidecarOptions{Mode: contract.ModeNative, GraceSeconds: 30, InitContainers: []string{"prep"}, Args: tt.args})
			waitReady(t, sc, pod.Target("data"))
			if tt.initDone {
				if err := os.WriteFile(podfiles.At(pod.TmpDir).InitDoneFile(), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Now()
			_ = sc.Signal(syscall.SIGTERM)
			code, err := sc.Wait(5 * time.Second)
			if err != nil || code != 0 {
				t.Fatalf("sidecar exit = %d, %v\n%s", code, err, sc.Output())
			}
			if took := sc.Exited.Sub(t0); took > time.Second {
				t.Fatalf("SIGTERM -> exit took %s, want at once", took)
			}
		})
	}
}

// (e) The sidecar refuses an offered volume (another protocol version, a flag outside the
// allowlist): it tells the node plugin why, and answers the mount with I/O errors, so the
// mount point still stats and the app fails visibly instead of meeting ENOTCONN; it then
// exits 1 with the reason.
func TestRefusedHandoffAnswersIOErrors(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*handoff.Volume)
		want   string
	}{
		{"other protocol version", func(v *handoff.Volume) { v.Version = handoff.MaxVersion + 1 }, "unsupported hand-off version"},
		{"flag outside the allowlist", func(v *handoff.Volume) { v.Flags = []string{"--key-file=/etc/shadow"} }, "key-file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "bkt-refused")
			pod, err := e.NewPod()
			if err != nil {
				t.Fatal(err)
			}
			v := rawVolume(e, "data", "bkt-refused")
			tt.change(&v)
			offer, err := pod.OfferRaw(v)
			if err != nil {
				t.Fatal(err)
			}
			sc := startSidecar(t, pod, testenv.SidecarOptions{Mode: contract.ModeNative, GraceSeconds: 30})
			st, err := offer.WaitStatus(handoff.StateRefused, 10*time.Second)
			if err != nil {
				t.Fatalf("%v\n%s", err, sc.Output())
			}
			if !strings.Contains(st.Message, tt.want) {
				t.Fatalf("refusal %q does not say %q", st.Message, tt.want)
			}
			target := pod.Target("data")
			if _, err := testenv.WaitReady(target, 5*time.Second); err != nil {
				t.Fatalf("the mount point of a refused volume must stat: %v\n%s", err, sc.Output())
			}
			if _, err := os.ReadDir(target); !errors.Is(err, syscall.EIO) {
				t.Fatalf("listing a refused volume: %v, want EIO (not ENOTCONN)", err)
			}
			if _, err := os.ReadFile(filepath.Join(target, "input.csv")); !errors.Is(err, syscall.EIO) {
				t.Fatalf("reading from a refused volume: %v, want EIO", err)
			}
			requireRunning(t, sc, "after refusing a volume")
			_ = sc.Signal(syscall.SIGTERM)
			code, err := sc.Wait(5 * time.Second)
			if err != nil || code != 1 {
				t.Fatalf("sidecar exit = %d, %v; want 1\n%s", code, err, sc.Output())
			}
			if msg := pod.TerminationMessage(); !strings.Contains(msg, "volume data") || !strings.Contains(msg, tt.want) {
				t.Fatalf("termination message %q does not carry the refusal", msg)
			}
		})
	}
}

// The sidecar sees a hand-off socket it cannot connect to yet (inotify reports it before the
// node plugin's chown: EACCES) for longer than the old 3 s retry window; it keeps trying and
// serves the volume once the socket is usable.
func TestSidecarRetriesASocketItCannotOpenYet(t *testing.T) {
	e := newEnv(t, "bkt-eacces")
	pod, err := e.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	fuse, err := pod.MountFuse("data", "bkt-eacces")
	if err != nil {
		t.Fatal(err)
	}
	defer fuse.Close()
	tmp, err := pod.OpenTmpDir()
	if err != nil {
		t.Fatal(err)
	}
	hd, err := podfiles.CreateHandoffDir(tmp)
	tmp.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	sock := podfiles.HandoffSocketName("data")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: podpath.ProcPath(hd, sock), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := unix.Fchmodat(int(hd.Fd()), sock, 0o700, 0); err != nil { // root only, for now
		t.Fatal(err)
	}
	sc := startSidecar(t, pod, testenv.SidecarOptions{Mode: contract.ModeLegacy, GraceSeconds: 30})
	time.Sleep(3500 * time.Millisecond)
	if !strings.Contains(sc.Output(), "permission denied") {
		t.Fatalf("the sidecar did not meet EACCES:\n%s", sc.Output())
	}
	if err := podpath.Chown(hd, sock, contract.SidecarUID, contract.SidecarGID); err != nil {
		t.Fatal(err)
	}
	_ = ln.SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := ln.AcceptUnix()
	if err != nil {
		t.Fatalf("the sidecar stopped trying: %v\n%s", err, sc.Output())
	}
	defer conn.Close()
	v := rawVolume(e, "data", "bkt-eacces")
	if err := handoff.SendVolume(conn, &v, int(fuse.Fd())); err != nil {
		t.Fatal(err)
	}
	fuse.Close()
	waitReady(t, sc, pod.Target("data"))
	if err := os.WriteFile(filepath.Join(pod.Target("data"), "ok.txt"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	requireObject(t, "bkt-eacces", "ok.txt", []byte("ok"))
	writeExitFile(t, e, pod)
	if code, err := sc.Wait(5 * time.Second); err != nil || code != 0 {
		t.Fatalf("sidecar exit = %d, %v\n%s", code, err, sc.Output())
	}
}
