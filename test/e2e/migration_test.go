package e2e

// The migration corpus (internal/testing/migration) on the cluster: every manifest written from the GKE
// driver's documentation runs with only the driver's install changed (installed under the
// GKE driver's name), or is refused with the reason its expectation line gives, at
// admission (the create call's error) or at mount (a FailedMount Event); and `kubectl
// gcsfuse audit` (pkg/audit, called directly) says the same of the same file, where.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/migration"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/audit"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

const (
	// corpusParallel bounds the corpus files applied at once: each starts a pod with a
	// gcsfuse on the local cluster's two cores.
	corpusParallel = 8
	// corpusWait bounds each wait of one file: its claims bound, its pods started, its
	// objects in the bucket, its refusal's Event, its pods gone.
	corpusWait = 120 * time.Second
	// corpusLabel marks the pods of one corpus file (its pod templates' label).
	corpusLabel = "gcsfuse-e2e/corpus"
)

// testCorpus applies every file of the corpus, corpusParallel at a time. It runs inside
// TestIncumbentDriverName, with the driver installed under the GKE driver's name, which
// every corpus volume uses.
func testCorpus(t *testing.T) {
	files, err := migration.Files()
	if err != nil {
		t.Fatal(err)
	}
	slots := make(chan struct{}, corpusParallel)
	start := time.Now()
	t.Run("files", func(t *testing.T) {
		for _, f := range files {
			t.Run(strings.TrimSuffix(f.Name, ".yaml"), func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				runCorpusFile(t, f)
			})
		}
	})
	record(t, fmt.Sprintf("migration corpus, %d files", len(files)), start, time.Now())
}

// corpusObjects are one file's objects, adapted to the test namespace.
type corpusObjects struct {
	classes   []*storagev1.StorageClass
	volumes   []*corev1.PersistentVolume
	claims    []*corev1.PersistentVolumeClaim
	workloads []any // *corev1.Pod, *appsv1.Deployment, *appsv1.StatefulSet, *batchv1.Job
	specs     []*corev1.PodSpec
}

// runCorpusFile applies one file and checks the driver and the audit against its
// expectation.
func runCorpusFile(t *testing.T, f migration.File) {
	values := map[string]string{migration.WorkloadImage: image("workload"), migration.SidecarImage: image("sidecar")}
	var buckets []string
	for _, p := range []string{migration.Bucket, migration.Bucket2} {
		if f.Uses(p) {
			values[p] = newBucket(t)
			buckets = append(buckets, values[p])
		}
	}
	data := f.Substitute(values)

	// The audit's verdict on this very file.
	inv := audit.NewInventory()
	if err := inv.AddManifest(f.Name, data); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Run(context.Background(), inv, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var stage audit.Stage
	if f.Expect.Refused {
		i := slices.IndexFunc(rep.Findings, func(fd audit.Finding) bool {
			return fd.Verdict == audit.Refused && strings.Contains(fd.Detail, f.Expect.Reason)
		})
		if i < 0 {
			t.Fatalf("the audit does not refuse it with %q: %v", f.Expect.Reason, rep.Findings)
		}
		stage = rep.Findings[i].Stage
	} else if rep.Refused() {
		t.Fatalf("expected to run, the audit refuses it: %v", rep.Findings)
	}

	objs := corpusAdapt(t, f, data)
	ctx := context.Background()
	for _, sc := range objs.classes {
		if _, err := cs.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create StorageClass %s: %v", sc.Name, err)
		}
		t.Cleanup(func() {
			_ = cs.StorageV1().StorageClasses().Delete(context.Background(), sc.Name, metav1.DeleteOptions{})
		})
	}
	for _, pv := range objs.volumes {
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create PersistentVolume %s: %v", pv.Name, err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
		})
	}
	for _, c := range objs.claims {
		if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create PersistentVolumeClaim %s: %v", c.Name, err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), c.Name, metav1.DeleteOptions{})
		})
	}
	// Created before the pods, as an apply of the file would eventually have them: the
	// webhook resolves a pod's claim at admission.
	for _, c := range objs.claims {
		waitClaimBound(t, c.Name)
	}
	for _, spec := range objs.specs {
		if spec.ServiceAccountName != "" {
			ensureServiceAccount(t, spec.ServiceAccountName)
		}
	}
	// Pods last out: their cleanup (which waits for them to be gone, their mounts with
	// them) runs first.
	t.Cleanup(func() { deleteCorpusPods(t, f.Name) })
	admissionErr := ""
	for _, w := range objs.workloads {
		err := createWorkload(t, w)
		if err == nil {
			continue
		}
		if _, bare := w.(*corev1.Pod); !bare || stage != audit.StageAdmission {
			t.Fatalf("create: %v", err)
		}
		admissionErr = err.Error()
	}

	switch {
	case stage == audit.StageAdmission:
		if !strings.Contains(admissionErr, f.Expect.Reason) {
			t.Fatalf("the audit refuses it at admission with %q; the API server's answer: %q", f.Expect.Reason, admissionErr)
		}
	case stage == audit.StageMount:
		pod := waitCorpusPod(t, f.Name)
		waitEvent(t, pod.Name, corpusWait, regexp.MustCompile(`^FailedMount$`), f.Expect.Reason)
	case f.Expect.Refused:
		t.Fatalf("the audit refuses it at %s, which this test does not check", stage)
	default:
		corpusRuns(t, f, objs, buckets)
	}
}

// corpusRuns checks a file expected to run: its pods were injected, its bare pods and Jobs
// succeeded, and every object its containers write is in a bucket, with the workload's
// content.
func corpusRuns(t *testing.T, f migration.File, objs corpusObjects, buckets []string) {
	pod := waitCorpusPod(t, f.Name)
	if pod.Annotations[contract.AnnotationInjected] == "" {
		t.Fatalf("pod %s was not injected: %v", pod.Name, pod.Annotations)
	}
	for _, w := range objs.workloads {
		switch o := w.(type) {
		case *corev1.Pod:
			waitSucceeded(t, o.Name)
		case *batchv1.Job:
			waitJobSucceeded(t, o.Name)
		}
	}
	for _, spec := range objs.specs {
		for _, c := range spec.Containers {
			name, size, ok := writeArgs(c.Args)
			if ok {
				waitCorpusObject(t, buckets, name, size)
			}
		}
	}
}

// corpusAdapt decodes a file (as the audit does) and adapts its objects to the test: the
// test namespace, cluster-scoped names made unique (and the references to them), the
// file's label on its pod templates, the local images never pulled.
func corpusAdapt(t *testing.T, f migration.File, data []byte) corpusObjects {
	decoded, err := audit.Decode(f.Name, data)
	if err != nil {
		t.Fatal(err)
	}
	suffix := "-" + strconv.Itoa(rand.IntN(1e6))
	renamed := map[string]string{}
	for _, o := range decoded {
		switch o.Value.(type) {
		case *corev1.PersistentVolume, *storagev1.StorageClass:
			renamed[o.Ref.Kind+"/"+o.Ref.Name] = o.Ref.Name + suffix
		}
	}
	rename := func(kind, name string) string {
		if n, ok := renamed[kind+"/"+name]; ok {
			return n
		}
		return name
	}
	var out corpusObjects
	label := func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) {
		if meta.Labels == nil {
			meta.Labels = map[string]string{}
		}
		meta.Labels[corpusLabel] = corpusID(f.Name)
		for i := range spec.Containers {
			if strings.HasPrefix(spec.Containers[i].Image, imageRepo+"/") {
				spec.Containers[i].ImagePullPolicy = corev1.PullNever
			}
		}
		out.specs = append(out.specs, spec)
	}
	for _, o := range decoded {
		switch v := o.Value.(type) {
		case *storagev1.StorageClass:
			v.Name = rename("StorageClass", v.Name)
			out.classes = append(out.classes, v)
		case *corev1.PersistentVolume:
			v.Name = rename("PersistentVolume", v.Name)
			v.Spec.StorageClassName = rename("StorageClass", v.Spec.StorageClassName)
			if v.Spec.ClaimRef != nil {
				v.Spec.ClaimRef.Namespace = ns
			}
			out.volumes = append(out.volumes, v)
		case *corev1.PersistentVolumeClaim:
			v.Namespace = ns
			v.Spec.VolumeName = rename("PersistentVolume", v.Spec.VolumeName)
			if v.Spec.StorageClassName != nil {
				v.Spec.StorageClassName = ptr(rename("StorageClass", *v.Spec.StorageClassName))
			}
			out.claims = append(out.claims, v)
		case *corev1.Pod:
			v.Namespace = ns
			label(&v.ObjectMeta, &v.Spec)
			out.workloads = append(out.workloads, v)
		case *appsv1.Deployment:
			v.Namespace = ns
			label(&v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec)
			out.workloads = append(out.workloads, v)
		case *appsv1.StatefulSet:
			v.Namespace = ns
			label(&v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec)
			out.workloads = append(out.workloads, v)
		case *batchv1.Job:
			v.Namespace = ns
			label(&v.Spec.Template.ObjectMeta, &v.Spec.Template.Spec)
			out.workloads = append(out.workloads, v)
		default:
			t.Fatalf("%s: kind %s: not one this test creates", o.Source, o.Ref.Kind)
		}
	}
	return out
}

// corpusID is a file's label value: its name without the extension.
func corpusID(file string) string { return strings.TrimSuffix(file, ".yaml") }

// createWorkload creates a pod or a workload in the test namespace, and deletes it at the
// end of the test.
func createWorkload(t *testing.T, w any) error {
	ctx := context.Background()
	var err error
	var del func() error
	bg := metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)}
	switch o := w.(type) {
	case *corev1.Pod:
		_, err = cs.CoreV1().Pods(ns).Create(ctx, o, metav1.CreateOptions{})
		del = func() error { return cs.CoreV1().Pods(ns).Delete(context.Background(), o.Name, metav1.DeleteOptions{}) }
	case *appsv1.Deployment:
		_, err = cs.AppsV1().Deployments(ns).Create(ctx, o, metav1.CreateOptions{})
		del = func() error { return cs.AppsV1().Deployments(ns).Delete(context.Background(), o.Name, bg) }
	case *appsv1.StatefulSet:
		_, err = cs.AppsV1().StatefulSets(ns).Create(ctx, o, metav1.CreateOptions{})
		del = func() error { return cs.AppsV1().StatefulSets(ns).Delete(context.Background(), o.Name, bg) }
	case *batchv1.Job:
		_, err = cs.BatchV1().Jobs(ns).Create(ctx, o, metav1.CreateOptions{})
		del = func() error { return cs.BatchV1().Jobs(ns).Delete(context.Background(), o.Name, bg) }
	default:
		t.Fatalf("cannot create a %T", w)
	}
	if err == nil {
		t.Cleanup(func() { _ = del() })
	}
	return err
}

// ensureServiceAccount creates a service account a corpus pod names (the GKE examples'
// gcs-csi), unless another file's run did.
func ensureServiceAccount(t *testing.T, name string) {
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account %s: %v", name, err)
	}
}

// corpusPods lists the pods of a file.
func corpusPods(file string) ([]corev1.Pod, error) {
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: corpusLabel + "=" + corpusID(file)})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// waitCorpusPod waits for the first pod of a file (a workload's pod appears after its
// controller made it).
func waitCorpusPod(t *testing.T, file string) corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(corpusWait)
	for {
		pods, err := corpusPods(file)
		if err == nil && len(pods) > 0 {
			return pods[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pod of %s after %s (%v)", file, corpusWait, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// deleteCorpusPods deletes a file's pods (a workload's too, its controller being deleted)
// and waits until they are gone, so that their volumes are unmounted while the driver
// still serves their name (TestIncumbentDriverName switches it back after the corpus).
func deleteCorpusPods(t *testing.T, file string) {
	deadline := time.Now().Add(corpusWait)
	for {
		pods, err := corpusPods(file)
		if err == nil && len(pods) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("pods of %s still there %s after their deletion (%v)", file, corpusWait, err)
			return
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				_ = cs.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitJobSucceeded waits for a Job's completion.
func waitJobSucceeded(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(corpusWait)
	for {
		j, err := cs.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
		switch {
		case err == nil && j.Status.Succeeded > 0:
			return
		case err == nil && j.Status.Failed > 0:
			t.Fatalf("job %s failed: %+v", name, j.Status)
		case time.Now().After(deadline):
			t.Fatalf("job %s not complete after %s: %v %v", name, corpusWait, err, j)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// writeArgs reads the object a workload container writes: "write -name N -bytes B".
func writeArgs(args []string) (name string, size int64, ok bool) {
	if len(args) == 0 || args[0] != "write" {
		return "", 0, false
	}
	size = 1 << 20 // the workload's default
	for i := 1; i+1 < len(args); i++ {
		switch args[i] {
		case "-name":
			name = args[i+1]
		case "-bytes":
			if n, err := strconv.ParseInt(args[i+1], 10, 64); err == nil {
				size = n
			}
		}
	}
	return name, size, name != ""
}

// waitCorpusObject waits until one of buckets holds name, or name in a directory (a
// sub-directory mount's), then checks its content.
func waitCorpusObject(t *testing.T, buckets []string, name string, size int64) {
	t.Helper()
	deadline := time.Now().Add(corpusWait)
	for {
		for _, b := range buckets {
			for key := range objects(t, b) {
				if key == name || strings.HasSuffix(key, "/"+name) {
					expectObject(t, b, key, size)
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no object %s in %v after %s", name, buckets, corpusWait)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
