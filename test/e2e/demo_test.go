package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// TestDemo is the cluster demo of hack/demo-cluster.sh (run only with E2E_DEMO=1): an
// Airflow-style pod (restartPolicy Never, writes a result file, exits) and a Job, each in
// native and legacy mode, next to the same pod without a bucket, and a table of what a user
// waits for.
func TestDemo(t *testing.T) {
	if os.Getenv("E2E_DEMO") != "1" {
		t.Skip("set E2E_DEMO=1 (hack/demo-cluster.sh)")
	}
	type row struct {
		name, mode  string
		mount, done time.Duration
		phase       corev1.PodPhase
		objects     string
	}
	var rows []row
	runOne := func(kind, mode string, withVolume bool) {
		bucket := ""
		var vols []volume
		dir := "/tmp"
		if withVolume {
			bucket = newBucket(t)
			vols = []volume{{"bucket", bucket, mountPath}}
			dir = mountPath
		}
		name := fmt.Sprintf("demo-%s-%s", kind, mode)
		o := podOpts{mode: mode, restart: corev1.RestartPolicyNever, volumes: vols,
			args: []string{"write", "-dir", dir, "-name", "result.json", "-bytes", strconv.Itoa(64 << 10)}}
		if !withVolume {
			name = fmt.Sprintf("demo-%s-no-volume", kind)
		}
		var sel metav1.ListOptions
		created := time.Now()
		switch kind {
		case "pod":
			sel = metav1.ListOptions{FieldSelector: "metadata.name=" + name}
			tr := track(t, sel)
			if withVolume {
				createPod(t, name, o)
			} else {
				_, spec := podTemplate(o)
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
				if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			p := waitPod(t, name, 120*time.Second, "terminal", terminal)
			rows = append(rows, row{name: kind, mode: modeLabel(mode, withVolume), phase: p.Status.Phase,
				mount:   appStart(t, name, appContainer).Sub(created),
				done:    tr.when(name, "phase:"+string(p.Status.Phase)).Sub(appExit(t, name, appContainer)),
				objects: bucketSummary(t, bucket)})
		case "job":
			tr := track(t, metav1.ListOptions{LabelSelector: "job-name=" + name})
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
			rows = append(rows, row{name: kind, mode: modeLabel(mode, withVolume), phase: corev1.PodPhase("Job " + string(cond)),
				mount: appStart(t, pod, appContainer).Sub(tr.when(pod, "phase:Pending")), // from the pod, not the Job: the Job controller adds its own delay
				done:  at.Sub(appExit(t, pod, appContainer)), objects: bucketSummary(t, bucket)})
		}
	}
	for _, kind := range []string{"pod", "job"} {
		runOne(kind, "", false)
		runOne(kind, contract.ModeNative, true)
		runOne(kind, contract.ModeLegacy, true)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-5s %-17s %22s %22s  %-13s %s\n", "kind", "sidecar", "pod created->app start", "app exit->pod/job done", "result", "objects in bucket")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-5s %-17s %21.2fs %21.2fs  %-13s %s\n", r.name, r.mode, r.mount.Seconds(), r.done.Seconds(), r.phase, r.objects)
	}
	fmt.Print(b.String())
}

func modeLabel(mode string, withVolume bool) string {
	if !withVolume {
		return "none (no volume)"
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
