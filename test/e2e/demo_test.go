package e2e

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// demoRuns is how many times each demo case runs (E2E_DEMO_RUNS overrides): enough for a
// median and a p90 on a noisy machine.
const demoRuns = 10

// kubeletRelistPeriod is the kubelet's generic PLEG relist period.
const kubeletRelistPeriod = time.Second

// TestDemo is the cluster demo of hack/demo-cluster.sh (run only with E2E_DEMO=1): an
// Airflow-style pod (restartPolicy Never, writes a result file, exits) and a Job, each in
// native and legacy mode, next to the same pod without a bucket, each run demoRuns times
// (interleaved, so that noise hits every case alike), and a table of what a user waits for:
// medians and p90s, and the overhead against no volume side by side. With
// E2E_DEMO_MARKDOWN=FILE (hack/demo-cluster.sh's DEMO_MARKDOWN) it also writes the README's
// generated block of the cluster's version.
func TestDemo(t *testing.T) {
	if !suite.Demo {
		t.Skip("set E2E_DEMO=1 (hack/demo-cluster.sh)")
	}
	runs := demoRuns
	if suite.DemoRuns > 0 {
		runs = suite.DemoRuns
	}
	type sample struct {
		mount, done time.Duration
		// seen splits done: app exit -> this host saw the kubelet report the app's last run
		// terminated (the wait for the kubelet's next relist, up to 1 s, not ours), then the
		// rest, where a sidecar that is still there when the kubelet looks would show.
		seen     time.Duration
		together bool
	}
	type result struct {
		kind, mode string
		// shared is a case of the shared mount mode (no sidecar): sharedFirst mounts a new
		// bucket each run (the first pod of its key on the node), sharedJoined one bucket
		// whose gcsfuse a holder pod keeps running (every later pod of the key).
		shared string
		// floor: no volume, and a trivial sidecar of the mode's shape (the workload image
		// doing nothing) before the app: what one more container costs a pod's start,
		// whatever it runs.
		floor   bool
		samples []sample
		phase   corev1.PodPhase
		objects string
	}
	var results []*result
	joinedBucket := ""
	runOne := func(res *result, i int, withVolume bool) {
		bucket := ""
		var vols []volume
		dir := "/tmp"
		if withVolume {
			bucket = newBucket(t)
			if res.shared == sharedJoined {
				bucket = joinedBucket
			}
			vols = []volume{{"bucket", bucket, mountPath}}
			dir = mountPath
		}
		name := fmt.Sprintf("demo-%s-%s-%d", res.kind, res.mode, i)
		switch {
		case res.shared != "":
			name = fmt.Sprintf("demo-%s-shared-%s-%d", res.kind, res.shared, i)
		case res.floor:
			name = fmt.Sprintf("demo-%s-trivial-%s-%d", res.kind, res.mode, i)
		case !withVolume:
			name = fmt.Sprintf("demo-%s-none-%d", res.kind, i)
		}
		o := podOpts{mode: res.mode, restart: corev1.RestartPolicyNever, volumes: vols,
			// A run time spread over the relist period too: the kubelet starts a native
			// pod's app right after a relist, so an app of fixed length would always exit
			// at the same phase of it.
			args: []string{"write", "-dir", dir, "-name", fmt.Sprintf("result-%s-%d.json", res.kind, i), "-bytes", strconv.Itoa(64 << 10),
				"-then", rand.N(kubeletRelistPeriod).String()}}
		if res.shared != "" {
			o.mode, o.attrs = "", sharedAttrs
		}
		var smp sample
		created := time.Now()
		switch res.kind {
		case "pod":
			tr := track(t, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			defer tr.stop()
			if withVolume {
				createPod(t, name, o)
			} else {
				_, spec := podTemplate(o)
				if res.floor {
					spec = withTrivialSidecar(spec, res.mode)
				}
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
				if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			p := waitPod(t, name, terminalWithin, "terminal", terminal)
			res.phase = p.Status.Phase
			smp.mount = appStart(t, name, appContainer).Sub(created)
			smp.done = tr.when(name, "phase:"+string(p.Status.Phase)).Sub(appExit(t, name, appContainer))
			smp.seen = tr.when(name, "terminated:"+appContainer+"@0").Sub(appExit(t, name, appContainer))
			if withVolume && res.shared == "" {
				smp.together = sidecarFirst(t, tr, name, p)
			}
			if res.floor {
				// The trivial sidecar is ended by the kubelet (native) or by a timer
				// (legacy): only the start is a floor.
				smp.done, smp.seen = 0, 0
			}
			_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		case "job":
			tr := track(t, metav1.ListOptions{LabelSelector: "job-name=" + name})
			defer tr.stop()
			if withVolume {
				createJob(t, name, o)
			} else {
				_, spec := podTemplate(o)
				job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: batchv1.JobSpec{
					BackoffLimit: ptr(int32(0)), Template: corev1.PodTemplateSpec{Spec: spec}}}
				if _, err := cs.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			cond, at := waitJob(t, name, 120*time.Second)
			pod := jobPod(t, tr)
			res.phase = corev1.PodPhase("Job " + string(cond))
			// From the pod, not the Job: the Job controller adds its own delay.
			smp.mount = appStart(t, pod, appContainer).Sub(tr.when(pod, "phase:Pending"))
			smp.done = at.Sub(appExit(t, pod, appContainer))
			smp.seen = tr.when(pod, "terminated:"+appContainer+"@0").Sub(appExit(t, pod, appContainer))
			if withVolume && res.shared == "" {
				smp.together = sidecarFirst(t, tr, pod, waitPod(t, pod, 30*time.Second, "terminal", terminal))
			}
			_ = cs.BatchV1().Jobs(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)})
		}
		res.samples = append(res.samples, smp)
		res.objects = bucketSummary(t, bucket)
	}
	for _, kind := range []string{"pod", "job"} {
		for _, mode := range []string{"", contract.ModeNative, contract.ModeLegacy} {
			results = append(results, &result{kind: kind, mode: mode})
		}
		for _, sh := range []string{sharedFirst, sharedJoined} {
			results = append(results, &result{kind: kind, mode: contract.ModeShared, shared: sh})
		}
	}
	// The joined cases' key: a holder pod keeps its gcsfuse running for the whole demo.
	joinedBucket = newBucket(t)
	holder := "demo-shared-holder"
	createPod(t, holder, podOpts{restart: corev1.RestartPolicyNever, volumes: []volume{{"bucket", joinedBucket, mountPath}},
		attrs: sharedAttrs, args: []string{"pause"}})
	waitPod(t, holder, 120*time.Second, "running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	defer func() {
		_ = cs.CoreV1().Pods(ns).Delete(context.Background(), holder, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	}()
	// The floor is measured on pods only: a Job's pod starts the same way.
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		results = append(results, &result{kind: "pod", mode: mode, floor: true})
	}
	for i := range runs {
		for _, r := range results {
			// The kubelet acts on containers once per PLEG relist, every second. Back-to-back
			// runs start in step with that clock, so each case would always meet it at the
			// same phase and the medians would compare phases, not modes (an artefact of
			// +0.6 s was measured that way). A random start spreads every case over the period.
			time.Sleep(rand.N(kubeletRelistPeriod))
			runOne(r, i, r.mode != "" && !r.floor)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d runs per case, medians (p50) and p90 on this host's clock; +x = p50 minus the same kind's p50 without a volume.\n", runs)
	fmt.Fprintf(&b, "app exit -> done splits into the wait for the kubelet's next relist (up to 1 s, the same with or without a sidecar)\n")
	fmt.Fprintf(&b, "and what follows it, where a sidecar still running when the kubelet looks would cost another relist.\n")
	fmt.Fprintf(&b, "%-5s %-17s %-30s %-30s %-14s %-16s %-9s  %-13s %s\n", "kind", "sidecar", "pod created -> app start",
		"app exit -> pod/Job done", "relist wait", "then -> done", "same look", "result", "objects in bucket")
	var base [3]time.Duration
	bases := map[string][3]time.Duration{}
	var md [][]string // the README's rows (hack/demo-cluster.sh with DEMO_MARKDOWN)
	version := "v" + kubeletVersion.String()
	for _, r := range results {
		var mount, done, seen, rest []time.Duration
		together := 0
		for _, s := range r.samples {
			mount, done = append(mount, s.mount), append(done, s.done)
			seen, rest = append(seen, s.seen), append(rest, s.done-s.seen)
			if s.together {
				together++
			}
		}
		mp50, mp90 := percentiles(mount)
		dp50, dp90 := percentiles(done)
		sp50, _ := percentiles(seen)
		rp50, _ := percentiles(rest)
		look := "-"
		switch {
		case r.floor:
			base = bases[r.kind]
			fmt.Fprintf(&b, "%-5s %-17s %5.2fs %5.2fs %+6.2fs          (the floor: one more container, whatever it runs)\n",
				r.kind, "trivial "+r.mode, mp50.Seconds(), mp90.Seconds(), (mp50 - base[0]).Seconds())
			md = append(md, []string{version, demoKind(r.kind), "do-nothing " + r.mode,
				fmt.Sprintf("%.2f s (p90 %.2f), %+.2f", mp50.Seconds(), mp90.Seconds(), (mp50 - base[0]).Seconds()), "-", "-", "-"})
			continue
		case r.mode == "":
			base = [3]time.Duration{mp50, dp50, rp50}
			bases[r.kind] = base
		case r.shared != "":
			look = "no sidecar"
		default:
			look = fmt.Sprintf("%d/%d", together, len(r.samples))
		}
		fmt.Fprintf(&b, "%-5s %-17s %5.2fs %5.2fs %+6.2fs          %5.2fs %5.2fs %+6.2fs          %5.2fs          %5.2fs %+6.2fs   %-9s  %-13s %s\n",
			r.kind, modeLabel(r.mode, r.shared), mp50.Seconds(), mp90.Seconds(), (mp50 - base[0]).Seconds(),
			dp50.Seconds(), dp90.Seconds(), (dp50 - base[1]).Seconds(), sp50.Seconds(),
			rp50.Seconds(), (rp50 - base[2]).Seconds(), look, r.phase, r.objects)
		row := []string{version, demoKind(r.kind), modeLabel(r.mode, r.shared),
			fmt.Sprintf("%.2f s (p90 %.2f)", mp50.Seconds(), mp90.Seconds()),
			fmt.Sprintf("%.2f s (p90 %.2f)", dp50.Seconds(), dp90.Seconds()),
			fmt.Sprintf("%.2f s", rp50.Seconds()), look}
		if r.mode == "" {
			row[2] = "none"
		} else { // against no volume
			row[3] += fmt.Sprintf(", %+.2f", (mp50 - base[0]).Seconds())
			row[4] += fmt.Sprintf(", %+.2f", (dp50 - base[1]).Seconds())
			row[5] += fmt.Sprintf(", %+.2f", (rp50 - base[2]).Seconds())
		}
		md = append(md, row)
	}
	fmt.Print(b.String())
	if file := suite.DemoMarkdown; file != "" {
		writeDemoMarkdown(t, file, md)
	}
}

// writeDemoMarkdown writes the README's generated block of this Kubernetes minor (one block
// per version the README shows) to file, for go run ./hack/readme to splice.
func writeDemoMarkdown(t *testing.T, file string, rows [][]string) {
	t.Helper()
	name := fmt.Sprintf("demo-cluster-%d.%d", kubeletVersion.Major(), kubeletVersion.Minor())
	by := fmt.Sprintf("DEMO_MARKDOWN=FILE K8S_VERSION=%s hack/demo-cluster.sh", kubeletVersion)
	header := []string{"version", "kind", "sidecar", "created -> app start", "app exit -> done", "of which after the relist", "same look"}
	writeBlock(t, file, name, by, header, rows)
}

// writeBlock writes a generated block (a table) to file, for go run ./hack/readme to splice
// into the document that carries it.
func writeBlock(t *testing.T, file, name, by string, header []string, rows [][]string) {
	t.Helper()
	blk, err := readmegen.New(name, by, readmegen.Table(header, rows...))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := readmegen.Write(f, blk); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote block %s to %s", name, file)
}

// demoKind is a case's kind as the README's table names it.
func demoKind(kind string) string {
	if kind == "job" {
		return "Job"
	}
	return kind
}

// percentiles returns the median and the 90th percentile (nearest rank).
func percentiles(ds []time.Duration) (p50, p90 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration { return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)] }
	return rank(0.5), rank(0.9)
}

// withTrivialSidecar puts a sidecar that does nothing before the app, shaped as the webhook
// shapes ours in mode: a native sidecar (an init container that always restarts, ended by
// the kubelet) or a legacy one (the first regular container, ending by itself shortly after
// the app). The kubelet starts it, and the app after it, exactly as it would ours.
func withTrivialSidecar(spec corev1.PodSpec, mode string) corev1.PodSpec {
	if mode == contract.ModeNative {
		c := workloadContainer("trivial-sidecar", nil, "pause")
		c.RestartPolicy = ptr(corev1.ContainerRestartPolicyAlways)
		spec.InitContainers = append([]corev1.Container{c}, spec.InitContainers...)
		return spec
	}
	c := workloadContainer("trivial-sidecar", nil, "sleep", "-for", (2 * kubeletRelistPeriod).String())
	spec.Containers = append([]corev1.Container{c}, spec.Containers...)
	return spec
}

// The shared mount mode's demo cases.
const (
	sharedFirst  = "first"  // a new key each run: the node's first mount of it
	sharedJoined = "joined" // a key whose gcsfuse is running: every later pod
)

func modeLabel(mode, shared string) string {
	switch {
	case mode == "":
		return "none (no volume)"
	case shared == sharedFirst:
		return "shared, 1st of key"
	case shared == sharedJoined:
		return "shared, joins key"
	}
	return mode
}

func bucketSummary(t *testing.T, bucket string) string {
	if bucket == "" {
		return "-"
	}
	var parts []string
	for _, n := range names(objects(t, bucket)) {
		parts = append(parts, n+" ("+objects(t, bucket)[n].Size+" B)")
	}
	return strings.Join(parts, ", ")
}
