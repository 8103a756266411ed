package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
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
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// TestChaosSoak's pace and bounds. The soak keeps chaosInFlight Jobs unfinished at a time
// (a 2-core machine runs about that many pods with their sidecars at once), and strikes a
// fault every chaosFaultEvery, each bounded by chaosFaultWithin.
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
	// chaosSettle bounds the wait for every Job to end once the soak stops creating them and
	// striking; chaosHung is how long a pod may stay unfinished before it counts as hung.
	chaosSettle = 4 * time.Minute
	chaosHung   = 3 * time.Minute
	// chaosCleanWithin bounds the wait, after the Jobs are deleted, for their pods, mounts
	// and sidecars' processes to be gone.
	chaosCleanWithin = 2 * time.Minute
	chaosVolume      = "chaosvol"
)

// chaosFault is one fault struck: its kind, what it hit, when, and how striking it failed
// (a fault that could not be struck is reported, not counted as struck).
type chaosFault struct {
	kind, detail string
	at           time.Time
	err          error
}

// chaosStrike strikes a fault of one kind and says what it hit.
type chaosStrike func(ctx context.Context, rng *rand.Rand) (string, error)

// TestChaosSoak (hack/chaos.sh; E2E_CHAOS=DURATION, CI's polling run a short one): for the
// soak's length, Jobs of every mode (a native sidecar, a legacy one, the node's shared
// mounter) on every node write files of random sizes, while a scheduler strikes, in turn:
// gcsfuse killed, a sidecar killed, the shared mounter killed, the node plugin killed, a
// webhook replica and the controller deleted, a kubelet restarted, a node drained and
// uncordoned, and the backend answering 503s, dropping connections and answering late. It
// counts, per fault and in all: Jobs Complete with every byte (size and MD5), Jobs failed
// loudly (Failed, saying why), and the outcomes never acceptable: an app whose close
// succeeded without its object (its receipt, written after the close, is in the bucket and
// the object is not whole), a pod Succeeded with a short object, a pod hung past
// chaosHung, a mount or a sidecar's gcsfuse left once the Jobs are deleted. Any of those
// fails it. Not struck: containerd restarted (the node's systemctl stand-in does not
// restart it). Serial: it drains nodes.
func TestChaosSoak(t *testing.T) {
	if suite.Chaos == 0 {
		t.Skip("set E2E_CHAOS=DURATION (hack/chaos.sh)")
	}
	nodes := needNodes(t, 2)
	if suite.Kubectl == "" || suite.NodeSystemctl == "" {
		t.Fatal("E2E_KUBECTL and E2E_NODE_SYSTEMCTL must be set: hack/e2e.sh sets them")
	}
	ctx := context.Background()
	id := strconv.FormatInt(time.Now().Unix()%100000, 10)
	modes := []string{contract.ModeNative, contract.ModeLegacy, contract.MountModeShared}
	buckets := map[string]string{}
	for _, m := range modes {
		buckets[m] = newBucket(t)
	}
	tr := track(t, metav1.ListOptions{LabelSelector: "chaos=" + id})
	// Whatever happens, no node is left cordoned, no bucket misbehaving, no kubelet stopped.
	t.Cleanup(func() { chaosRestore(t, nodes, buckets) })

	faults := chaosFaults(nodes, buckets, id)
	var (
		mu     sync.Mutex
		struck []chaosFault
	)
	fctx, stopFaults := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		order := slices.Collect(func(yield func(string) bool) {
			for k := range faults {
				if !yield(k) {
					return
				}
			}
		})
		slices.Sort(order)
		tick := time.NewTicker(chaosFaultEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-fctx.Done():
				return
			case <-tick.C:
			}
			if i%len(order) == 0 {
				rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
			}
			kind := order[i%len(order)]
			sctx, cancel := context.WithTimeout(fctx, chaosFaultWithin)
			at := time.Now()
			detail, err := faults[kind](sctx, rng)
			cancel()
			mu.Lock()
			struck = append(struck, chaosFault{kind: kind, detail: detail, at: at, err: err})
			mu.Unlock()
		}
	}()

	// Jobs, chaosInFlight unfinished at a time, each mode and node in turn.
	type job struct {
		name, mode, node string
		size             int64
	}
	jobs := map[string]job{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	end := time.Now().Add(suite.Chaos)
	for i := 0; time.Now().Before(end); {
		unfinished, err := chaosUnfinished(ctx, id)
		if err != nil {
			t.Logf("list jobs: %v", err)
		}
		for ; err == nil && unfinished < chaosInFlight && time.Now().Before(end); unfinished++ {
			j := job{name: fmt.Sprintf("chaos-%s-%d", id, i), mode: modes[i%len(modes)], node: nodes[(i/len(modes))%len(nodes)],
				size: int64(chaosMinChunks+rng.IntN(chaosMaxChunks-chaosMinChunks)) << 16}
			if err := createChaosJob(ctx, j.name, id, j.mode, j.node, buckets[j.mode], j.size, rng.IntN(2) == 0); err != nil {
				t.Logf("create job %s: %v", j.name, err)
				break
			}
			jobs[j.name] = j
			i++
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopFaults()
	wg.Wait()
	chaosRestore(t, nodes, buckets)
	soaked := time.Now()

	// Every Job ends: Complete or Failed.
	conds := map[string]batchv1.JobConditionType{}
	deadline := time.Now().Add(chaosSettle)
	for len(conds) < len(jobs) && time.Now().Before(deadline) {
		list, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "chaos=" + id})
		if err == nil {
			for _, j := range list.Items {
				for _, c := range j.Status.Conditions {
					if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
						conds[j.Name] = c.Type
						if c.Type == batchv1.JobFailed {
							t.Logf("job %s (%s on %s) failed: %s: %s", j.Name, jobs[j.Name].mode, jobs[j.Name].node, c.Reason, c.Message)
						}
					}
				}
			}
		}
		time.Sleep(time.Second)
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
	type outcome struct{ hit, succeeded, failed, lost, hung int }
	perFault := map[string]*outcome{}
	mu.Lock()
	defer mu.Unlock()
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
		if _, receipt := objs[j.mode][name+".bin.done"]; receipt && !whole(j.mode, name, j.size) {
			bad = append(bad, fmt.Sprintf("pod %s (%s on %s): its app's close succeeded (its receipt is in the bucket), its object %s is not whole", name, j.mode, p.Spec.NodeName, describeObject(objs[j.mode], name+".bin")))
		}
		if p.Status.Phase == corev1.PodSucceeded && !whole(j.mode, name, j.size) {
			bad = append(bad, fmt.Sprintf("pod %s (%s on %s) Succeeded with object %s, want %d bytes", name, j.mode, p.Spec.NodeName, describeObject(objs[j.mode], name+".bin"), j.size))
		}
		losses = append(losses, bad...)
		if p.Status.Phase == corev1.PodFailed {
			failedPods = append(failedPods, fmt.Sprintf("pod %s (%s on %s) Failed: %s", name, j.mode, p.Spec.NodeName, whyFailed(p)))
		}
		isHung := finished.IsZero() && gone.IsZero() && settled.Sub(created) > chaosHung
		if isHung {
			hung = append(hung, fmt.Sprintf("pod %s (%s on %s): %s since %s", name, j.mode, p.Spec.NodeName, p.Status.Phase, created.Format(time.TimeOnly)))
		}
		last := settled
		for _, at := range []time.Time{finished, gone} {
			if !at.IsZero() && at.Before(last) {
				last = at
			}
		}
		for _, f := range struck {
			if f.err != nil || f.at.Before(created) || f.at.After(last) {
				continue
			}
			o := perFault[f.kind]
			if o == nil {
				o = &outcome{}
				perFault[f.kind] = o
			}
			o.hit++
			switch {
			case len(bad) > 0:
				o.lost++
			case isHung:
				o.hung++
			case p.Status.Phase == corev1.PodSucceeded:
				o.succeeded++
			default:
				o.failed++
			}
		}
	}
	complete, failed := 0, 0
	for name, j := range jobs {
		switch conds[name] {
		case batchv1.JobComplete:
			complete++
		case batchv1.JobFailed:
			failed++
		default:
			hung = append(hung, fmt.Sprintf("job %s (%s, preferring %s): not ended %s after the soak", name, j.mode, j.node, chaosSettle))
		}
	}

	header := []string{"fault", "struck", "not struck", "pods running at it", "of them Succeeded", "failed loudly", "lost", "hung"}
	var rows [][]string
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "%s\t\n", strings.Join(header, "\t"))
	kinds := slices.Sorted(func(yield func(string) bool) {
		for k := range faults {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range kinds {
		n, notStruck := 0, 0
		for _, f := range struck {
			if f.kind == k {
				if f.err != nil {
					notStruck++
				} else {
					n++
				}
			}
		}
		o := perFault[k]
		if o == nil {
			o = &outcome{}
		}
		row := []string{k}
		for _, v := range []int{n, notStruck, o.hit, o.succeeded, o.failed, o.lost, o.hung} {
			row = append(row, strconv.Itoa(v))
		}
		rows = append(rows, row)
		fmt.Fprintf(w, "%s\t\n", strings.Join(row, "\t"))
	}
	w.Flush()
	t.Logf("chaos soak of %s (%s on %d nodes): %d Jobs, %d Complete with every byte, %d failed loudly, %d hung; %d pods; %d losses; %d faults; every Job ended %s after the soak\n%s",
		suite.Chaos, strings.Join(modes, ", "), len(nodes), len(jobs), complete, failed, len(jobs)-complete-failed, len(tr.podNames()), len(losses), len(struck),
		settled.Sub(soaked).Round(time.Second), b.String())
	if file := suite.ChaosMarkdown; file != "" {
		total := fmt.Sprintf("%d Jobs in %s on %d nodes: %d Complete with every byte, %d Failed, %d hung; %d pods; %d lost", len(jobs), suite.Chaos,
			len(nodes), complete, failed, len(jobs)-complete-failed, len(tr.podNames()), len(losses))
		rows = append(rows, []string{"**all**", strconv.Itoa(len(struck)), "", total, "", "", "", ""})
		writeBlock(t, file, "chaos", "CHAOS_MARKDOWN=FILE hack/chaos.sh "+suite.Chaos.String(), header, rows)
	}
	for _, f := range struck {
		if f.err != nil {
			t.Logf("fault %s at %s not struck: %v", f.kind, f.at.Format(time.TimeOnly), f.err)
		} else {
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
	if err := cs.BatchV1().Jobs(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)},
		metav1.ListOptions{LabelSelector: "chaos=" + id}); err != nil {
		t.Fatalf("delete the soak's jobs: %v", err)
	}
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

// chaosUnfinished counts the soak's Jobs that have not ended.
func chaosUnfinished(ctx context.Context, id string) (int, error) {
	list, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "chaos=" + id})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, j := range list.Items {
		if !slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
			return (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue
		}) {
			n++
		}
	}
	return n, nil
}

// createChaosJob creates one of the soak's Jobs: its pod prefers node (tolerating the extra
// nodes' taint) and writes size bytes to <pod>.bin, then its receipt; finish: the app
// finishes its file on SIGTERM, else it gives up. A pod evicted (DisruptionTarget) is
// replaced without counting against the backoff limit.
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
	ann, spec := podTemplate(o)
	spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: "POD_NAME",
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	spec.Tolerations = []corev1.Toleration{{Key: extraNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
	}}
	labels := map[string]string{"chaos": id}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(chaosBackoff)),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action:          batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
			}}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: spec},
		},
	}
	_, err := cs.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	return err
}

// chaosGcsfuse lists the gcsfuse processes serving the soak's buckets: the shared
// mounter's (shared) or the sidecars' (!shared).
func chaosGcsfuse(buckets map[string]string, shared bool) []int {
	var pids []int
	for _, pid := range testenv.GcsfusePIDs(func(args []string) bool {
		for _, b := range buckets {
			if len(args) >= 2 && args[len(args)-2] == b {
				return true
			}
		}
		return false
	}) {
		if isMounter(parentPID(pid)) == shared {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isMounter tells whether pid is a shared mounter (the sidecar's binary in shared mode).
func isMounter(pid int) bool {
	args := testenv.ProcessArgs(pid)
	return len(args) > 0 && filepath.Base(args[0]) == "gcsfuse-sidecar" && slices.Contains(args, "--mode=shared")
}

// chaosFaults are the soak's faults by kind.
func chaosFaults(nodes []string, buckets map[string]string, id string) map[string]chaosStrike {
	kill := func(what string, pids func() []int) chaosStrike {
		return func(_ context.Context, rng *rand.Rand) (string, error) {
			p := pids()
			if len(p) == 0 {
				return "", fmt.Errorf("no %s running", what)
			}
			pid := p[rng.IntN(len(p))]
			args := testenv.ProcessArgs(pid)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return "", fmt.Errorf("kill %s %d: %w", what, pid, err)
			}
			return fmt.Sprintf("SIGKILL %s pid %d (%s)", what, pid, strings.Join(args[:min(len(args), 3)], " ")), nil
		}
	}
	deletePod := func(what, selector string) chaosStrike {
		return func(ctx context.Context, rng *rand.Rand) (string, error) {
			list, err := cs.CoreV1().Pods(driverNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil || len(list.Items) == 0 {
				return "", fmt.Errorf("no %s pod: %v", what, err)
			}
			p := list.Items[rng.IntN(len(list.Items))]
			if err := cs.CoreV1().Pods(driverNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				return "", err
			}
			return "deleted " + p.Name + " on " + p.Spec.NodeName, nil
		}
	}
	backend := func(fault map[string]any) chaosStrike {
		return func(ctx context.Context, rng *rand.Rand) (string, error) {
			modes := slices.Sorted(func(yield func(string) bool) {
				for m := range buckets {
					if !yield(m) {
						return
					}
				}
			})
			m := modes[rng.IntN(len(modes))]
			if err := emulatorAdmin(ctx, http.MethodPut, "faults/"+buckets[m], fault); err != nil {
				return "", err
			}
			return fmt.Sprintf("bucket of %s: %v", m, fault), nil
		}
	}
	return map[string]chaosStrike{
		"gcsfuse killed": kill("gcsfuse", func() []int { return append(chaosGcsfuse(buckets, false), chaosGcsfuse(buckets, true)...) }),
		"sidecar killed": kill("sidecar", func() []int {
			var p []int
			for _, pid := range chaosGcsfuse(buckets, false) {
				if pp := parentPID(pid); pp != 0 {
					p = append(p, pp)
				}
			}
			return p
		}),
		"shared mounter killed": kill("shared mounter", func() []int {
			return testenv.ProcessPIDs(func(args []string) bool {
				return filepath.Base(args[0]) == "gcsfuse-sidecar" && slices.Contains(args, "--mode=shared")
			})
		}),
		"node plugin killed": kill("node plugin", func() []int {
			return testenv.ProcessPIDs(func(args []string) bool { return filepath.Base(args[0]) == "gcsfuse-csi-node" })
		}),
		"webhook replica deleted": deletePod("webhook", "app=gcsfuse-webhook"),
		"controller deleted":      deletePod("controller", "app=gcsfuse-csi-controller"),
		"kubelet restarted": func(ctx context.Context, rng *rand.Rand) (string, error) {
			i := rng.IntN(len(nodes))
			if err := systemctl(ctx, strconv.Itoa(i+1), "restart", "kubelet"); err != nil {
				return "", err
			}
			return "kubelet of " + nodes[i], nil
		},
		"node drained": func(ctx context.Context, rng *rand.Rand) (string, error) {
			node := nodes[1+rng.IntN(len(nodes)-1)] // never node 1: it carries the emulator
			start := time.Now()
			out, err := exec.CommandContext(ctx, suite.Kubectl, "--kubeconfig", suite.Kubeconfig, "drain", node,
				"--ignore-daemonsets", "--delete-emptydir-data", "--pod-selector=chaos="+id, "--timeout=120s").CombinedOutput()
			drained := time.Since(start).Round(time.Second)
			if uerr := uncordon(node); uerr != nil {
				err = errors.Join(err, uerr)
			}
			if err != nil {
				return "", fmt.Errorf("drain %s: %w\n%s", node, err, out)
			}
			return fmt.Sprintf("%s drained in %s (%d pods evicted), uncordoned", node, drained, strings.Count(string(out), " evicted\n")), nil
		},
		"backend 503s":         backend(map[string]any{"op": "write", "status": http.StatusServiceUnavailable, "count": 3}),
		"backend drops":        backend(map[string]any{"op": "write", "drop": true, "count": 2}),
		"backend answers late": backend(map[string]any{"op": "write", "delayMs": 3000, "count": 2}),
	}
}

// chaosRestore undoes what a fault may have left: every node uncordoned and its kubelet
// running, every bucket's faults disarmed. Idempotent.
func chaosRestore(t *testing.T, nodes []string, buckets map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, n := range nodes {
		if err := uncordon(n); err != nil {
			t.Errorf("%v", err)
		}
		if err := systemctl(ctx, strconv.Itoa(i+1), "start", "kubelet"); err != nil {
			t.Errorf("%v", err)
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
	cmd.Env = append(os.Environ(), "GCSFUSE_CSI_NODE="+index)
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
