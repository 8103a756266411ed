package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/e2e/e2econfig"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// TestChaosSoak's pace and bounds. The soak keeps chaosInFlight Jobs unfinished at a time
// (a 2-core machine runs about that many pods with their sidecars at once), and strikes a
// fault at most every chaosFaultEvery (a long one, a drain, delays the next), each bounded
// by chaosFaultWithin.
const (
	chaosInFlight    = 8
	chaosFaultEvery  = 4 * time.Second
	chaosFaultWithin = 150 * time.Second
	// chaosGrace is the Jobs' pods' grace; chaosBackoff their Job's retries of a pod that
	// failed for another cause than an eviction (which the podFailurePolicy ignores).
	chaosGrace, chaosBackoff = 20, 4
	// Each Job writes chaosChunks (a random count in [min, max)) 64 KiB chunks,
	// chaosChunkDelay apart: 2.4 to 6 s of writing, so faults strike mid-write.
	chaosMinChunks, chaosMaxChunks = 16, 40
	chaosChunkDelay                = 150 * time.Millisecond
	// chaosHealthyWithin bounds the wait, once the faults stop, for the driver's pods to be
	// Ready again (a plugin killed twice is in its crash-loop back-off); chaosSettle then
	// bounds the wait for every Job to end, past which a pod still running is hung (a pod
	// whose mount met a killed plugin waits out the kubelet's mount back-off, up to 2 min).
	chaosHealthyWithin = 3 * time.Minute
	chaosSettle        = 4 * time.Minute
	// chaosCleanWithin bounds the wait, after the Jobs are deleted, for their pods, mounts
	// and sidecars' processes to be gone.
	chaosCleanWithin = 2 * time.Minute
	chaosVolume      = "chaosvol"
)

// chaosScope is what a fault struck: a node's pods, a mode's bucket, or every pod ("").
type chaosScope struct{ node, mode string }

// chaosFault is one fault struck: its kind, what it hit, when, and how striking it failed
// (a fault that could not be struck is reported, not counted as struck).
type chaosFault struct {
	kind, detail string
	scope        chaosScope
	at           time.Time
	err          error
}

// errNoTarget: a process fault found nothing of its kind to kill at that moment (no Job of
// a sidecar mode running): not struck, and not a failure of the soak.
var errNoTarget = errors.New("nothing to strike")

// chaosStrike strikes a fault of one kind and says what it hit.
type chaosStrike func(ctx context.Context, rng *rand.Rand) (chaosScope, string, error)

// TestChaosSoak (hack/chaos.sh; E2E_CHAOS=DURATION, CI's polling run a short one): for the
// soak's length, Jobs of every mode (a native sidecar, a legacy one, the node's shared
// mounter) on every node write files of random sizes, while a scheduler strikes, in a
// shuffled round: gcsfuse killed, a sidecar killed, the shared mounter killed, the node
// plugin killed, a webhook replica and the controller deleted, a kubelet and containerd
// restarted, a node drained and uncordoned, and the backend answering 503s, dropping
// connections and answering late. It counts, per fault (the pods alive at it on its node or
// bucket) and in all: Jobs Complete with every byte (size and MD5), pods and Jobs failed
// loudly (Failed, saying why), and the outcomes never acceptable: an app whose close
// succeeded without its object (its receipt, written after the close, is in the bucket and
// the object is not whole), a pod Succeeded with a short object or without its receipt, a
// Job Complete without a Succeeded pod holding a whole object, a pod still running
// chaosSettle after the driver is healthy again (hung), a fault that found its target yet
// could not strike, and a mount or a sidecar's gcsfuse left once the Jobs are deleted. Any
// of those fails it. Serial: it drains nodes; the driver is healthy again when it returns.
func TestChaosSoak(t *testing.T) {
	if suite.Chaos == 0 {
		t.Skip("set E2E_CHAOS=DURATION (hack/chaos.sh)")
	}
	needRoot(t)
	nodes := needNodes(t, 2)
	if suite.Kubectl == "" || suite.NodeSystemctl == "" {
		t.Fatal("E2E_KUBECTL and E2E_NODE_SYSTEMCTL must be set: hack/e2e.sh sets them")
	}
	ctx := context.Background()
	id := strconv.FormatInt(time.Now().Unix()%100000, 10)
	seed := uint64(time.Now().UnixNano())
	t.Logf("soak %s: seed %d", id, seed)
	modes := []string{contract.ModeNative, contract.ModeLegacy, contract.MountModeShared}
	buckets := map[string]string{}
	for _, m := range modes {
		buckets[m] = newBucket(t)
	}
	tr := track(t, metav1.ListOptions{LabelSelector: "chaos=" + id})
	// A soak stopped half way leaves no Job writing into the tests after it.
	t.Cleanup(func() { deleteJobs(t, metav1.ListOptions{LabelSelector: "chaos=" + id}) })
	// Whatever happens, no node is left cordoned, no bucket misbehaving, no kubelet or
	// containerd stopped, the driver healthy (registered first: runs after the faults stop).
	t.Cleanup(func() { chaosRestore(t, nodes, buckets) })

	faults := chaosFaults(nodes, buckets, id)
	if all := slices.Sorted(maps.Keys(faults)); !slices.Equal(all, e2econfig.ChaosKinds) {
		t.Fatalf("the soak strikes %v; e2econfig.ChaosKinds (what E2E_CHAOS_FAULTS may name) says %v", all, e2econfig.ChaosKinds)
	}
	if len(suite.ChaosFaults) > 0 {
		chosen := map[string]chaosStrike{}
		for _, k := range suite.ChaosFaults {
			chosen[k] = faults[k]
		}
		faults = chosen
	}
	kinds := slices.Sorted(maps.Keys(faults))
	t.Logf("soak %s strikes: %s", id, strings.Join(kinds, ", "))
	var (
		struck []chaosFault // written by the fault goroutine until wg.Wait
		wg     sync.WaitGroup
		stop   = make(chan struct{})
		once   sync.Once
	)
	stopFaults := func() { once.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(stopFaults)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		order := slices.Clone(kinds)
		tick := time.NewTicker(chaosFaultEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if i%len(order) == 0 {
				rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
			}
			kind := order[i%len(order)]
			// Not cancelled by the stop: a restart cut half way would leave a kubelet
			// without its pid file.
			sctx, cancel := context.WithTimeout(context.Background(), chaosFaultWithin)
			at := time.Now()
			scope, detail, err := faults[kind](sctx, rng)
			cancel()
			struck = append(struck, chaosFault{kind: kind, detail: detail, scope: scope, at: at, err: err})
		}
	}()

	// Jobs, chaosInFlight unfinished at a time, each mode and node in turn.
	type job struct {
		name, mode, node string
		size             int64
	}
	jobs := map[string]job{}
	rng := rand.New(rand.NewPCG(seed, 2))
	end := time.Now().Add(suite.Chaos)
	for i := 0; time.Now().Before(end); time.Sleep(time.Second) {
		ended, err := chaosEnded(ctx, id)
		if err != nil {
			t.Logf("list jobs: %v", err)
			continue
		}
		for unfinished := len(jobs) - countIn(ended, jobs); unfinished < chaosInFlight && time.Now().Before(end); unfinished++ {
			j := job{name: fmt.Sprintf("chaos-%s-%d", id, i), mode: modes[i%len(modes)], node: nodes[(i/len(modes))%len(nodes)],
				size: int64(chaosMinChunks+rng.IntN(chaosMaxChunks-chaosMinChunks)) << 16}
			if err := createChaosJob(ctx, j.name, id, j.mode, j.node, buckets[j.mode], j.size, rng.IntN(2) == 0); err != nil {
				t.Logf("create job %s: %v", j.name, err)
				break
			}
			jobs[j.name] = j
			i++
		}
	}
	stopFaults()
	chaosRestore(t, nodes, buckets)
	healthy := time.Now()

	// Every Job ends: Complete or Failed.
	var ended map[string]batchv1.JobCondition
	for deadline := healthy.Add(chaosSettle); ; time.Sleep(time.Second) {
		e, err := chaosEnded(ctx, id)
		if err == nil {
			ended = e
		}
		if countIn(ended, jobs) == len(jobs) || time.Now().After(deadline) {
			break
		}
	}
	settled := time.Now()

	objs := map[string]map[string]object{}
	for m, b := range buckets {
		objs[m] = objects(t, b)
	}
	whole := func(mode, pod string, size int64) bool {
		o, ok := objs[mode][pod+".bin"]
		return ok && o.Size == strconv.FormatInt(size, 10) && o.MD5Hash == patternMD5(size)
	}
	var losses, hung, failedPods []string
	type outcome struct{ alive, succeeded, failed, lost, hung int }
	perFault := map[string]*outcome{}
	wholeOf := map[string]bool{} // Job -> a Succeeded pod of it holds a whole object
	for _, name := range tr.podNames() {
		p := tr.last(name)
		j, ok := jobs[p.Labels["job-name"]]
		if !ok {
			continue
		}
		created := p.CreationTimestamp.Time
		finished := tr.when(name, "phase:"+string(corev1.PodSucceeded))
		if finished.IsZero() {
			finished = tr.when(name, "phase:"+string(corev1.PodFailed))
		}
		gone := tr.when(name, "deleted")
		var bad []string
		_, receipt := objs[j.mode][name+".bin.done"]
		if receipt && !whole(j.mode, name, j.size) {
			bad = append(bad, fmt.Sprintf("pod %s (%s on %s): its app's close succeeded (its receipt is in the bucket), its object %s is not whole", name, j.mode, p.Spec.NodeName, describeObject(objs[j.mode], name+".bin")))
		}
		if p.Status.Phase == corev1.PodSucceeded {
			switch {
			case !whole(j.mode, name, j.size):
				bad = append(bad, fmt.Sprintf("pod %s (%s on %s) Succeeded with object %s, want %d bytes", name, j.mode, p.Spec.NodeName, describeObject(objs[j.mode], name+".bin"), j.size))
			case !receipt:
				bad = append(bad, fmt.Sprintf("pod %s (%s on %s) Succeeded (its app exits 0 only once its receipt is closed) without its receipt %s.bin.done", name, j.mode, p.Spec.NodeName, name))
			default:
				wholeOf[j.name] = true
			}
		}
		losses = append(losses, bad...)
		if p.Status.Phase == corev1.PodFailed {
			failedPods = append(failedPods, fmt.Sprintf("pod %s (%s on %s) Failed: %s", name, j.mode, p.Spec.NodeName, whyFailed(p)))
		}
		isHung := finished.IsZero() && gone.IsZero() && settled.Sub(healthy) >= chaosSettle
		if isHung {
			hung = append(hung, fmt.Sprintf("pod %s (%s on %s): %s since %s, %s after the driver was healthy again", name, j.mode, p.Spec.NodeName,
				p.Status.Phase, created.Format(time.TimeOnly), chaosSettle))
		}
		last := settled
		for _, at := range []time.Time{finished, gone} {
			if !at.IsZero() && at.Before(last) {
				last = at
			}
		}
		for _, f := range struck {
			if f.err != nil || f.at.Before(created) || f.at.After(last) ||
				(f.scope.node != "" && f.scope.node != p.Spec.NodeName) || (f.scope.mode != "" && f.scope.mode != j.mode) {
				continue
			}
			o := perFault[f.kind]
			if o == nil {
				o = &outcome{}
				perFault[f.kind] = o
			}
			o.alive++
			switch {
			case len(bad) > 0:
				o.lost++
			case isHung:
				o.hung++
			case p.Status.Phase == corev1.PodSucceeded:
				o.succeeded++
			case p.Status.Phase == corev1.PodFailed:
				o.failed++
			}
		}
	}
	complete, failed := 0, 0
	for _, name := range slices.Sorted(maps.Keys(jobs)) {
		j := jobs[name]
		c, ok := ended[name]
		switch {
		case !ok:
			hung = append(hung, fmt.Sprintf("job %s (%s, preferring %s): not ended %s after the driver was healthy again", name, j.mode, j.node, chaosSettle))
		case c.Type == batchv1.JobComplete:
			complete++
			if !wholeOf[name] {
				losses = append(losses, fmt.Sprintf("job %s (%s) Complete, but no pod of it seen Succeeded with its whole object and receipt", name, j.mode))
			}
		default:
			failed++
			t.Logf("job %s (%s, preferring %s) Failed: %s: %s", name, j.mode, j.node, c.Reason, c.Message)
		}
	}

	header := []string{"fault", "struck", "not struck", "pods alive at it (its node, its bucket)", "of them Succeeded", "Failed (loudly)", "lost", "hung"}
	var rows [][]string
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "%s\t\n", strings.Join(header, "\t"))
	strikes := 0
	for _, k := range kinds {
		n, notStruck := 0, 0
		for _, f := range struck {
			switch {
			case f.kind != k:
			case f.err != nil:
				notStruck++
			default:
				n++
			}
		}
		strikes += n
		o := perFault[k]
		if o == nil {
			o = &outcome{}
		}
		row := []string{k}
		for _, v := range []int{n, notStruck, o.alive, o.succeeded, o.failed, o.lost, o.hung} {
			row = append(row, strconv.Itoa(v))
		}
		rows = append(rows, row)
		fmt.Fprintf(w, "%s\t\n", strings.Join(row, "\t"))
	}
	w.Flush()
	summary := fmt.Sprintf("%d Jobs in %s on %d nodes: %d Complete with every byte, %d Failed, %d not ended; %d pods (%d Failed); %d lost, %d hung",
		len(jobs), suite.Chaos, len(nodes), complete, failed, len(jobs)-complete-failed, len(tr.podNames()), len(failedPods), len(losses), len(hung))
	t.Logf("chaos soak %s (%s): %s; %d faults struck; every Job ended %s after the driver was healthy again\n%s",
		id, strings.Join(modes, ", "), summary, strikes, settled.Sub(healthy).Round(time.Second), b.String())
	for _, f := range struck {
		switch {
		case errors.Is(f.err, errNoTarget):
			t.Logf("fault %s at %s: not struck: %v", f.kind, f.at.Format(time.TimeOnly), f.err)
		case f.err != nil:
			t.Errorf("fault %s at %s could not be struck: %v", f.kind, f.at.Format(time.TimeOnly), f.err)
		default:
			t.Logf("fault %s at %s: %s", f.kind, f.at.Format(time.TimeOnly), f.detail)
		}
	}
	for _, f := range failedPods {
		t.Log(f)
	}
	for _, l := range losses {
		t.Errorf("LOST: %s", l)
	}
	for _, h := range hung {
		t.Errorf("HUNG: %s", h)
	}
	if complete == 0 {
		t.Errorf("no Job completed: the soak proved nothing")
	}

	// Nothing left once the Jobs are deleted: no pod, no volume mount on any node, no
	// sidecar's gcsfuse for the soak's buckets (the shared mounter's may linger).
	deleteJobs(t, metav1.ListOptions{LabelSelector: "chaos=" + id})
	var left []string
	for deadline := time.Now().Add(chaosCleanWithin); ; time.Sleep(time.Second) {
		left = nil
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "chaos=" + id})
		if err != nil {
			left = append(left, "list pods: "+err.Error())
		} else {
			for _, p := range pods.Items {
				left = append(left, "pod "+p.Name)
			}
		}
		for _, n := range nodes {
			for _, m := range nodeMounts(t, n, "/volumes/kubernetes.io~csi/"+chaosVolume+"/") {
				left = append(left, "mount on "+n+": "+m)
			}
		}
		for _, pid := range chaosGcsfuse(buckets, false) {
			left = append(left, fmt.Sprintf("a sidecar's gcsfuse (pid %d): %s", pid, strings.Join(testenv.ProcessArgs(pid), " ")))
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("LEAKED, %s after the soak's Jobs were deleted:\n%s", chaosCleanWithin, strings.Join(left, "\n"))
	}
	// The table, a benchmark's, whatever the soak found (its row of all says what was lost or
	// hung; the test's failure says that it was).
	if file := suite.ChaosMarkdown; file != "" {
		rows = append(rows, []string{"**all**", strconv.Itoa(strikes), "", summary, "", "", "", ""})
		writeBlock(t, file, "chaos", "CHAOS_MARKDOWN=FILE hack/chaos.sh "+suite.Chaos.String(), header, rows)
	}
}

// countIn counts the keys of ended that are among jobs (a Job created by a call that
// returned an error is not one of the soak's).
func countIn[V, W any](ended map[string]V, jobs map[string]W) int {
	n := 0
	for name := range ended {
		if _, ok := jobs[name]; ok {
			n++
		}
	}
	return n
}

// deleteJobs deletes the test namespace's Jobs the selector lists, and their pods.
func deleteJobs(t *testing.T, sel metav1.ListOptions) {
	t.Helper()
	if err := cs.BatchV1().Jobs(ns).DeleteCollection(context.Background(),
		metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)}, sel); err != nil {
		t.Errorf("delete jobs %s: %v", sel.LabelSelector, err)
	}
}

// whyFailed says how a failed pod said so: its DisruptionTarget (an eviction) and its
// containers' ends.
func whyFailed(p *corev1.Pod) string {
	var why []string
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			why = append(why, "DisruptionTarget ("+c.Reason+")")
		}
	}
	for _, st := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if term := st.State.Terminated; term != nil && term.ExitCode != 0 {
			why = append(why, fmt.Sprintf("%s exited %d (%s)", st.Name, term.ExitCode, term.Reason))
		}
	}
	if len(why) == 0 {
		return p.Status.Reason + " " + p.Status.Message
	}
	return strings.Join(why, ", ")
}

// describeObject says what the bucket holds under name, for a loss's message.
func describeObject(objs map[string]object, name string) string {
	o, ok := objs[name]
	if !ok {
		return name + " (missing)"
	}
	return fmt.Sprintf("%s (%s bytes, md5 %s)", name, o.Size, o.MD5Hash)
}

// chaosEnded are the soak's Jobs that have ended (Complete or Failed), by name.
func chaosEnded(ctx context.Context, id string) (map[string]batchv1.JobCondition, error) {
	list, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "chaos=" + id})
	if err != nil {
		return nil, err
	}
	ended := map[string]batchv1.JobCondition{}
	for _, j := range list.Items {
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				ended[j.Name] = c
			}
		}
	}
	return ended, nil
}

// createChaosJob creates one of the soak's Jobs: its pod prefers node and writes size bytes
// to <pod>.bin, then its receipt; finish: the app finishes its file on SIGTERM, else it
// gives up.
func createChaosJob(ctx context.Context, name, id, mode, node, bucket string, size int64, finish bool) error {
	args := []string{"write", "-dir", mountPath, "-name", "$(POD_NAME).bin", "-receipt",
		"-bytes", strconv.FormatInt(size, 10), "-chunk-delay", chaosChunkDelay.String()}
	if finish {
		args = append(args, "-finish-on-term")
	}
	o := podOpts{restart: corev1.RestartPolicyNever, grace: ptr(int64(chaosGrace)),
		volumes: []volume{{chaosVolume, bucket, mountPath}}, args: args}
	if mode == contract.MountModeShared {
		o.attrs = sharedAttrs
	} else {
		o.mode = mode
	}
	job := preferringJob(name, node, map[string]string{"chaos": id}, chaosBackoff, o)
	c := &job.Spec.Template.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	_, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	return err
}

// preferringJob is a Job whose pods prefer node (and tolerate the extra nodes' taint) but
// may run elsewhere, and whose pod an eviction failed (DisruptionTarget) is replaced without
// counting against its backoff limit: the podFailurePolicy a user gives a Job that a drain
// may interrupt.
func preferringJob(name, node string, labels map[string]string, backoff int32, o podOpts) *batchv1.Job {
	ann, spec := podTemplate(o)
	spec.Tolerations = []corev1.Toleration{{Key: extraNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
	}}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(backoff),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: spec},
		},
	}
}

// chaosGcsfuse lists the gcsfuse processes serving the soak's buckets: the shared
// mounter's (shared) or the sidecars' (!shared).
func chaosGcsfuse(buckets map[string]string, shared bool) []int {
	var pids []int
	for _, b := range slices.Sorted(maps.Values(buckets)) {
		for _, pid := range bucketGcsfuse(b) {
			if isMounter(testenv.ProcessArgs(parentPID(pid))) == shared {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// isMounter tells whether args are a shared mounter's (the sidecar's binary in shared mode).
func isMounter(args []string) bool {
	return isSidecar(args) && slices.Contains(args, "--mode=shared")
}

// isSidecar tells whether args are the sidecar binary's (a sidecar's or the mounter's).
func isSidecar(args []string) bool {
	return len(args) > 0 && filepath.Base(args[0]) == "gcsfuse-sidecar"
}

// nodeOf names the node whose init pid descends from (hack/nodeinit -hostname NODE), "" if
// none.
func nodeOf(pid int, nodes []string) string {
	for p, hops := pid, 0; p > 1 && hops < 64; p, hops = parentPID(p), hops+1 {
		args := testenv.ProcessArgs(p)
		if len(args) > 0 && filepath.Base(args[0]) == "nodeinit" {
			for _, n := range nodes {
				if slices.Contains(args, n) {
					return n
				}
			}
		}
	}
	return ""
}

// chaosFaults are the soak's faults by kind.
func chaosFaults(nodes []string, buckets map[string]string, id string) map[string]chaosStrike {
	// kill SIGKILLs one of the processes pids lists, its command line checked again by
	// match just before (a pid reused since the listing is not killed).
	kill := func(what string, pids func() []int, match func([]string) bool) chaosStrike {
		return func(_ context.Context, rng *rand.Rand) (chaosScope, string, error) {
			p := pids()
			if len(p) == 0 {
				return chaosScope{}, "", fmt.Errorf("no %s running: %w", what, errNoTarget)
			}
			pid := p[rng.IntN(len(p))]
			node := nodeOf(pid, nodes)
			args := testenv.ProcessArgs(pid)
			if !match(args) {
				return chaosScope{}, "", fmt.Errorf("%s %d ended before the kill: %w", what, pid, errNoTarget)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
				return chaosScope{}, "", fmt.Errorf("%s %d ended before the kill: %w", what, pid, errNoTarget)
			} else if err != nil {
				return chaosScope{}, "", fmt.Errorf("kill %s %d: %w", what, pid, err)
			}
			return chaosScope{node: node}, fmt.Sprintf("SIGKILL %s pid %d on %s (%s)", what, pid, node, strings.Join(args[:min(len(args), 3)], " ")), nil
		}
	}
	isGcsfuse := func(args []string) bool { return len(args) > 0 && filepath.Base(args[0]) == "gcsfuse" }
	isPlugin := func(args []string) bool { return len(args) > 0 && filepath.Base(args[0]) == "gcsfuse-csi-node" }
	deletePod := func(what, selector string) chaosStrike {
		return func(ctx context.Context, rng *rand.Rand) (chaosScope, string, error) {
			list, err := cs.CoreV1().Pods(driverNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil || len(list.Items) == 0 {
				return chaosScope{}, "", fmt.Errorf("no %s pod: %v", what, err)
			}
			p := list.Items[rng.IntN(len(list.Items))]
			if err := cs.CoreV1().Pods(driverNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				return chaosScope{}, "", err
			}
			return chaosScope{}, "deleted " + p.Name + " on " + p.Spec.NodeName, nil
		}
	}
	restart := func(unit string) chaosStrike {
		return func(ctx context.Context, rng *rand.Rand) (chaosScope, string, error) {
			i := rng.IntN(len(nodes))
			if err := systemctl(ctx, strconv.Itoa(i+1), "restart", unit); err != nil { // hack/'s node N is nodes[N-1]
				return chaosScope{}, "", err
			}
			return chaosScope{node: nodes[i]}, unit + " of " + nodes[i], nil
		}
	}
	backend := func(fault map[string]any) chaosStrike {
		return func(ctx context.Context, rng *rand.Rand) (chaosScope, string, error) {
			modes := slices.Sorted(maps.Keys(buckets))
			m := modes[rng.IntN(len(modes))]
			if err := emulatorAdmin(ctx, http.MethodPut, "faults/"+buckets[m], fault); err != nil {
				return chaosScope{}, "", err
			}
			return chaosScope{mode: m}, fmt.Sprintf("bucket of %s: %v", m, fault), nil
		}
	}
	return map[string]chaosStrike{
		"gcsfuse-killed": kill("gcsfuse", func() []int { return append(chaosGcsfuse(buckets, false), chaosGcsfuse(buckets, true)...) }, isGcsfuse),
		"sidecar-killed": kill("sidecar", func() []int {
			var p []int
			for _, pid := range chaosGcsfuse(buckets, false) {
				if pp := parentPID(pid); isSidecar(testenv.ProcessArgs(pp)) {
					p = append(p, pp)
				}
			}
			return p
		}, func(args []string) bool { return isSidecar(args) && !isMounter(args) }),
		"mounter-killed":       kill("shared mounter", func() []int { return testenv.ProcessPIDs(isMounter) }, isMounter),
		"node-plugin-killed":   kill("node plugin", func() []int { return testenv.ProcessPIDs(isPlugin) }, isPlugin),
		"webhook-deleted":      deletePod("webhook", webhookSelector),
		"controller-deleted":   deletePod("controller", "app=gcsfuse-csi-controller"),
		"kubelet-restarted":    restart("kubelet"),
		"containerd-restarted": restart("containerd"),
		"node-drained": func(ctx context.Context, rng *rand.Rand) (chaosScope, string, error) {
			node := nodes[1+rng.IntN(len(nodes)-1)] // never node 1: it carries the emulator
			start := time.Now()
			out, err := drain(ctx, node, "--pod-selector=chaos="+id, "--timeout=120s")
			drained := time.Since(start).Round(time.Second)
			if uerr := uncordon(node); uerr != nil {
				err = errors.Join(err, uerr)
			}
			if err != nil {
				return chaosScope{}, "", err
			}
			return chaosScope{node: node}, fmt.Sprintf("%s drained in %s (%d pods evicted), uncordoned", node, drained, strings.Count(out, " evicted\n")), nil
		},
		"backend-503":  backend(map[string]any{"op": "write", "status": http.StatusServiceUnavailable, "count": 3}),
		"backend-drop": backend(map[string]any{"op": "write", "drop": true, "count": 2}),
		"backend-slow": backend(map[string]any{"op": "write", "delayMs": 3000, "count": 2}),
	}
}

// chaosRestore undoes what a fault may have left: every node uncordoned and its kubelet and
// containerd running, every bucket's faults disarmed; then waits for every node Ready and
// every pod of the driver Ready (a plugin killed twice is in its crash-loop back-off), so
// that the tests after the soak meet a healthy driver. Idempotent.
func chaosRestore(t *testing.T, nodes []string, buckets map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i, n := range nodes {
		if err := uncordon(n); err != nil {
			t.Errorf("%v", err)
		}
		for _, unit := range []string{"containerd", "kubelet"} {
			if err := systemctl(ctx, strconv.Itoa(i+1), "start", unit); err != nil {
				t.Errorf("%v", err)
			}
		}
	}
	for _, b := range buckets {
		if err := emulatorAdmin(ctx, http.MethodDelete, "faults/"+b, nil); err != nil {
			t.Errorf("%v", err)
		}
	}
	if err := nodesReady(nodeBackWithin); err != nil {
		t.Errorf("%v", err)
	}
	var notReady []string
	for deadline := time.Now().Add(chaosHealthyWithin); ; time.Sleep(time.Second) {
		notReady = nil
		pods, err := cs.CoreV1().Pods(driverNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			notReady = append(notReady, err.Error())
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}) {
				notReady = append(notReady, p.Name+" on "+p.Spec.NodeName)
			}
		}
		if len(notReady) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(notReady) > 0 {
		t.Errorf("the driver's pods not Ready %s after the faults: %v", chaosHealthyWithin, notReady)
	}
}

// drain drains node with the cluster's kubectl (--ignore-daemonsets, --delete-emptydir-data,
// and the further flags) and returns what it printed.
func drain(ctx context.Context, node string, flags ...string) (string, error) {
	args := append([]string{"--kubeconfig", suite.Kubeconfig, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data"}, flags...)
	out, err := exec.CommandContext(ctx, suite.Kubectl, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl drain %s: %w\n%s", node, err, out)
	}
	return string(out), nil
}

// uncordon uncordons node with the cluster's kubectl.
func uncordon(node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, suite.Kubectl, "--kubeconfig", suite.Kubeconfig, "uncordon", node).CombinedOutput(); err != nil {
		return fmt.Errorf("uncordon %s: %v\n%s", node, err, out)
	}
	return nil
}

// systemctl runs `systemctl VERB UNIT` through hack/'s node index's stand-in; it may run
// outside the test's goroutine (nodeSystemctl is its test-bound form).
func systemctl(ctx context.Context, index, verb, unit string) error {
	cmd := exec.CommandContext(ctx, "bash", suite.NodeSystemctl, verb, unit)
	cmd.Env = append(cmd.Environ(), "GCSFUSE_CSI_NODE="+index)
	// A child the timeout's kill leaves behind must not hold the output open for ever.
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("systemctl %s %s on node %s: %v\n%s", verb, unit, index, err, out)
	}
	return nil
}

// emulatorAdmin is admin for any goroutine: it returns its error instead of failing a test.
func emulatorAdmin(ctx context.Context, method, path string, body any) error {
	_, err := adminDo(ctx, method, path, body)
	return err
}
