package e2e

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// upgradeTimeout bounds the upgrade command (helm upgrade, rollouts, the driver registered
// again): a hung upgrade fails the test instead of the suite's timeout.
const upgradeTimeout = 5 * time.Minute

// upgradeLoopFor is how long the pods started on the previous release write: long enough
// to span the whole upgrade (7 s here, more on a loaded node) with writes before, during and after it.
const upgradeLoopFor = 40 * time.Second

// TestUpgradeFromPreviousRelease (issues 14 and 16): `hack/e2e.sh` with UPGRADE_FROM=previous
// installs the previous release (its own chart and images, hack/previous-release.sh); this
// test starts pods on it, upgrades the driver to this tree the way a user does
// (E2E_UPGRADE_CMD: hack/deploy.sh, a `helm upgrade` of the release), creates a pod while
// the upgrade rolls out, and checks the version-skew promise of docs/upgrade.md:
//   - pods started on the previous release keep their mounts across the upgrade (they write
//     and read through them before, during and after it) and end correctly under the new
//     node plugin: their sidecars, of the previous release, exit when the workload is done,
//     with every file the workload says it wrote in the bucket;
//   - a pod admitted by the previous release's webhook and held by a scheduling gate until
//     the upgrade is done works: the new node plugin serves the previous release's sidecar;
//   - a pod created during the rollout works, whichever webhook and node plugin serve it;
//   - a pod created after it gets this tree's sidecar;
//   - no sidecar exit failure is reported.
//
// It runs only in that run (it needs the previous release installed first); the main run
// skips it, saying so.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	prev, upgradeCmd := suite.PreviousRelease, suite.UpgradeCmd
	if prev == "" {
		t.Skip("E2E_PREVIOUS_RELEASE unset: runs in hack/e2e.sh's upgrade run (UPGRADE_FROM=previous, part of hack/test.sh)")
	}
	ctx := context.Background()
	if got := tagOf(nodePluginImage(t)); got != prev {
		t.Fatalf("the installed node plugin is %q, want the previous release's tag %q", nodePluginImage(t), prev)
	}

	const size = 64 << 10
	readName := "shared.bin"
	type run struct{ bucket, name string }
	old := map[string]run{}
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		if mode == contract.ModeNative && !nativeOK {
			continue // its subtest below says why
		}
		r := run{newBucket(t), podName(t, "old-"+mode)}
		upload(t, r.bucket, readName, 300<<10)
		createPod(t, r.name, podOpts{
			mode: mode, restart: corev1.RestartPolicyNever,
			volumes: []volume{{"bucket", r.bucket, mountPath}},
			args: []string{"loop", "-dir", mountPath, "-prefix", "part", "-bytes", strconv.Itoa(size), "-every", "500ms",
				"-for", upgradeLoopFor.String(), "-read", readName, "-read-bytes", strconv.Itoa(300 << 10)},
		})
		old[mode] = r
	}
	for mode, r := range old {
		waitObjects(t, r.bucket, "part", 2, 120*time.Second)
		if img := sidecarImage(t, r.name); tagOf(img) != prev {
			t.Fatalf("%s pod started on the previous release has sidecar %s, want tag %s", mode, img, prev)
		}
	}

	// A pod admitted now (the previous release's webhook injects its sidecar) but held from
	// the node by a scheduling gate until the upgrade is done: the new node plugin then hands
	// its volume to the previous release's sidecar, deterministically, which a pod created
	// during the rollout does only by chance.
	gated := run{newBucket(t), podName(t, "gated")}
	gatedOpts := oneFile(gated.bucket, "gated.bin")
	gatedOpts.gate = upgradeGate
	createPod(t, gated.name, gatedOpts)
	if img := sidecarImage(t, gated.name); tagOf(img) != prev {
		t.Fatalf("gated pod admitted by the previous release has sidecar %s, want tag %s", img, prev)
	}

	// The upgrade, with a pod created while it rolls out.
	upCtx, cancel := context.WithTimeout(ctx, upgradeTimeout)
	defer cancel()
	started := time.Now()
	cmd := exec.CommandContext(upCtx, "bash", "-c", upgradeCmd)
	upgradeDone := make(chan error, 1)
	var upgradeOut strings.Builder
	cmd.Stdout, cmd.Stderr = &upgradeOut, &upgradeOut
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the upgrade (%s): %v", upgradeCmd, err)
	}
	go func() { upgradeDone <- cmd.Wait() }()
	during := run{newBucket(t), podName(t, "during")}
	time.Sleep(2 * time.Second) // helm is rendering and applying by now
	createDuringRollout(t, during.name, oneFile(during.bucket, "during.bin"))
	if err := <-upgradeDone; err != nil {
		t.Fatalf("upgrade (%s): %v\n%s", upgradeCmd, err, upgradeOut.String())
	}
	upgraded := time.Now()
	record(t, "upgrade from the previous release (helm upgrade -> rolled out, driver registered)", started, upgraded)
	newTag := tagOf(nodePluginImage(t))
	if newTag == prev {
		t.Fatalf("after the upgrade the node plugin is still %s", nodePluginImage(t))
	}
	t.Logf("upgraded %s -> %s in %s", prev, newTag, upgraded.Sub(started).Round(100*time.Millisecond))

	ungate(t, gated.name)
	after := run{newBucket(t), podName(t, "after")}
	// The previous release's webhook pod may still be terminating (rollout status returns once
	// the new ones are available), and it stops serving at once: the same tolerance.
	createDuringRollout(t, after.name, oneFile(after.bucket, "after.bin"))

	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		t.Run("old-"+mode, func(t *testing.T) {
			if mode == contract.ModeNative {
				needNative(t)
			}
			r := old[mode]
			p := waitSucceeded(t, r.name)
			if img := sidecarImage(t, r.name); tagOf(img) != prev {
				t.Errorf("sidecar is %s after the upgrade: a running pod's sidecar must not change", img)
			}
			l := logs(r.name, appContainer)
			m := doneAfter.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("the workload did not finish its loop:\n%s\n%s", l, describe(p))
			}
			said, _ := strconv.Atoi(m[1])
			if n := partFiles(t, r.bucket, "part", size); n != said {
				t.Fatalf("the workload wrote %d files, the bucket has %d", said, n)
			}
			// The mount served the pod after the new node plugin was in place, not only before.
			last := lastWrite(l)
			if !last.After(upgraded) {
				t.Fatalf("last write at %s, not after the upgrade finished at %s: the loop did not span it", last, upgraded)
			}
			t.Logf("%s: %d files written and read back across the upgrade, last %s after it; sidecar %s ended cleanly",
				mode, said, last.Sub(upgraded).Round(100*time.Millisecond), prev)
		})
	}
	t.Run("previous-sidecar-new-node-plugin", func(t *testing.T) { checkOneFile(t, gated.name, gated.bucket, "gated.bin", prev) })
	t.Run("during-rollout", func(t *testing.T) { checkOneFile(t, during.name, during.bucket, "during.bin", "") })
	t.Run("after", func(t *testing.T) { checkOneFile(t, after.name, after.bucket, "after.bin", newTag) })
	t.Run("no-exit-failure", noSidecarExitFailure)
}

// rolloutRetries bounds the creates of the pod made during the upgrade.
const rolloutRetries = 10

// createDuringRollout creates a pod while the webhook rolls from the previous release. That
// release's webhook stops serving the moment it gets SIGTERM (it has no --shutdown-delay),
// so a create that kube-proxy still sends to it is refused ("failed calling webhook"): the
// create is retried then, as a controller would, and the refusal logged. This tree's webhook
// keeps serving through its delay (TestWebhookRestart proves no create is refused).
func createDuringRollout(t *testing.T, name string, o podOpts) {
	t.Helper()
	pod := podObject(name, o)
	for attempt := 1; ; attempt++ {
		_, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "failed calling webhook") || attempt == rolloutRetries {
			t.Fatalf("create pod %s during the upgrade (attempt %d): %v", name, attempt, err)
		}
		t.Logf("create of %s refused by the previous release's stopping webhook, retrying: %v", name, err)
		time.Sleep(500 * time.Millisecond)
	}
}

// oneFileSize is what oneFile pods write.
const oneFileSize = 100000

// oneFile is a pod that writes one file of oneFileSize bytes into bucket and exits.
func oneFile(bucket, file string) podOpts {
	return podOpts{
		restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", bucket, mountPath}},
		args: []string{"write", "-dir", mountPath, "-name", file, "-bytes", strconv.Itoa(oneFileSize)},
	}
}

// checkOneFile waits for a oneFile pod to succeed and checks its file, and its sidecar's
// image tag unless wantTag is "".
func checkOneFile(t *testing.T, pod, bucket, file, wantTag string) {
	t.Helper()
	waitSucceeded(t, pod)
	expectObject(t, bucket, file, oneFileSize)
	img := sidecarImage(t, pod)
	if wantTag != "" && tagOf(img) != wantTag {
		t.Fatalf("pod %s has sidecar %s, want tag %s", pod, img, wantTag)
	}
	t.Logf("pod %s: sidecar %s, %s complete", pod, img, file)
}

// upgradeGate holds a pod from scheduling until the test removes it.
const upgradeGate = "gcsfuse-csi.e2e/after-upgrade"

// ungate removes the pod's scheduling gates, so the scheduler places it.
func ungate(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.SchedulingGates = nil
		_, err = cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || attempt == 5 {
			t.Fatalf("remove the scheduling gate of %s: %v", name, err)
		}
	}
}

var (
	doneAfter = regexp.MustCompile(`(?m)^done after (\d+) files$`)
	wroteLine = regexp.MustCompile(`(?m)^wrote \S+ at (\d+)$`)
)

// lastWrite is when the loop workload says it finished its last file (this host's clock).
func lastWrite(log string) time.Time {
	m := wroteLine.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		return time.Time{}
	}
	ms, _ := strconv.ParseInt(m[len(m)-1][1], 10, 64)
	return time.UnixMilli(ms)
}

// tagOf is the tag of an image reference ("" without one).
func tagOf(ref string) string {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ""
	}
	return ref[i+1:]
}

// nodePluginImage is the image of the running node plugin pod's container.
func nodePluginImage(t *testing.T) string {
	t.Helper()
	p, err := cs.CoreV1().Pods("gcsfuse-csi").Get(context.Background(), nodePluginPod(t).Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Spec.Containers[0].Image
}

// sidecarImage is the image of a pod's injected sidecar (native: an init container).
func sidecarImage(t *testing.T, pod string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		if c.Name == contract.SidecarContainerName {
			return c.Image
		}
	}
	t.Fatalf("pod %s has no %s container", pod, contract.SidecarContainerName)
	return ""
}
