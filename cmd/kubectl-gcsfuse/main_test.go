package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/migration"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/audit"
)

// plugin runs the plugin with args and stdin, returning its exit status, stdout, stderr.
func plugin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

const cleanPod = `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  containers: [{name: app, image: app}]
  volumes:
    - name: data
      csi: {driver: gcsfuse.csi.storage, volumeAttributes: {bucketName: my-bucket}}
`

// The corpus, its placeholders substituted, in a directory: every file read, one line per
// finding, the summary last, exit 1 (the corpus has refusals).
func TestAuditCorpusDirectory(t *testing.T) {
	files, err := migration.Files()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	values := map[string]string{migration.Bucket: "my-bucket", migration.Bucket2: "my-bucket-2",
		migration.WorkloadImage: "example.com/app:1", migration.SidecarImage: "example.com/sidecar:1"}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Substitute(values), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Not manifests: skipped by the walk.
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# not yaml: {"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := plugin(t, "", "audit", "-f", dir)
	if code != exitRefused || errOut != "" {
		t.Fatalf("exit %d, stderr %q; want %d", code, errOut, exitRefused)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[len(lines)-1], "summary: ") {
		t.Errorf("last line %q, want the summary", lines[len(lines)-1])
	}
	for _, want := range []string{
		"Pod/gke-inline-task volume data: mapped: bucket my-bucket; gcsfuseLoggingSeverity=warning -> --log-severity=warning; metadataCacheTTLSeconds=600 -> --metadata-cache-ttl-secs=600; driver gcsfuse.csi.storage.gke.io",
		"Pod/gke-cloud-profiler volume gcs-fuse-csi-ephemeral: refused: at admission: ",
		"Pod/gke-opt-in-capitalised pod: mapped: sidecar injected (native); annotation gke-gcsfuse/volumes=True -> gcsfuse.csi.storage/volumes",
		"Pod/gke-request-above-limit pod: refused: at admission: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
}

func TestAuditExitStatus(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	clean := write("clean.yaml", cleanPod)
	refused := write("refused.yaml", strings.Replace(cleanPod, "bucketName: my-bucket", `bucketName: "_"`, 1))
	broken := write("broken.yaml", cleanPod+"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: [x\n")
	empty := t.TempDir()
	for _, tt := range []struct {
		name    string
		stdin   string
		args    []string
		code    int
		out     string // in stdout
		errText string // in stderr
	}{
		{"nothing refused", "", []string{"audit", "-f", clean}, exitOK, "Pod/ns/p volume data: unchanged: bucket my-bucket", ""},
		{"refused", "", []string{"audit", "-f", refused}, exitRefused, `refused: at admission: volume data: bucket name "_"`, ""},
		{"stdin", cleanPod, []string{"audit", "-f", "-"}, exitOK, "summary: 2 unchanged", ""},
		{"two inputs", "", []string{"audit", "-f", clean, "--filename", refused}, exitRefused, "summary: 2 unchanged, 0 mapped, 1 refused", ""},
		{"not YAML", "", []string{"audit", "-f", broken}, exitError, "", "broken.yaml:"},
		{"missing file", "", []string{"audit", "-f", filepath.Join(dir, "nope.yaml")}, exitError, "", "nope.yaml"},
		{"directory without manifests", "", []string{"audit", "-f", empty}, exitError, "", "no *.yaml, *.yml or *.json file"},
		{"files and a cluster", "", []string{"audit", "-f", clean, "--kubeconfig", "x"}, exitError, "", "give one or the other"},
		{"stray argument", "", []string{"audit", "-f", clean, "extra.yaml"}, exitError, "", `unexpected argument "extra.yaml"`},
		{"stdin twice", "", []string{"audit", "-f", "-", "-f", "-"}, exitError, "", "more than once"},
		{"unknown flag", "", []string{"audit", "--bogus"}, exitError, "", "flag provided but not defined"},
		{"no command", "", nil, exitError, "", "Usage:"},
		{"unknown command", "", []string{"apply"}, exitError, "", `unknown command "apply"`},
		{"help", "", []string{"help"}, exitOK, "", "Usage:"},
		{"audit help", "", []string{"audit", "-h"}, exitOK, "", "Usage:"},
		{"no cluster", "", []string{"audit", "--kubeconfig", filepath.Join(dir, "missing-kubeconfig")}, exitError, "", "kubeconfig"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := plugin(t, tt.stdin, tt.args...)
			if code != tt.code || !strings.Contains(out, tt.out) || !strings.Contains(errOut, tt.errText) {
				t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q", code, out, errOut, tt.code, tt.out, tt.errText)
			}
		})
	}
}

// A cluster's objects: a pod its ReplicaSet controls is judged through the Deployment's
// template (what would be recreated), a bare pod as it is; claims resolve to the
// cluster's PersistentVolumes, or, not bound yet, to what their StorageClass provisions
// (the directory named after the claim's uid).
func TestReadCluster(t *testing.T) {
	yes := true
	gcsClass := "gcs"
	vol := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: "gcsfuse.csi.storage.gke.io", VolumeAttributes: map[string]string{"bucketName": "my-bucket", "multiNICIndex": "0"}}}}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}, Volumes: []corev1.Volume{vol}}
	cs := fake.NewClientset(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: appsv1.DeploymentSpec{
			Template: corev1.PodTemplateSpec{Spec: spec}}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", Controller: &yes}}},
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1-abc", Namespace: "ns",
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", Controller: &yes}}}, Spec: spec},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "ns"}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "app"}},
			Volumes:    []corev1.Volume{{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: "gcsfuse.csi.storage", VolumeHandle: "my-bucket:one"}}}},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "gcs"}, Provisioner: "gcsfuse.csi.storage",
			Parameters: map[string]string{"bucketName": "my-bucket", "pathPrefix": "claims"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "ns", UID: "0f1e"},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &gcsClass}},
	)
	inv := audit.NewInventory()
	if err := readObjects(context.Background(), cs, inv, ""); err != nil {
		t.Fatal(err)
	}
	rep, err := audit.Run(context.Background(), inv, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range rep.Findings {
		lines = append(lines, f.String())
	}
	out := strings.Join(lines, "\n")
	for _, want := range []string{
		"PersistentVolume/pv1: mapped: bucket my-bucket; volumeHandle my-bucket:one -> bucket my-bucket",
		"Pod/ns/bare volume claim: mapped: claim c -> PersistentVolume pv1",
		`Deployment/ns/web volume data: refused: at admission: volume data: volume attribute multiNICIndex`,
		"StorageClass/gcs: unchanged: provisioner gcsfuse.csi.storage: each claim gets its own directory gs://my-bucket/claims/<volume>/",
		"PersistentVolumeClaim/ns/pending: unchanged: no PersistentVolume binds it: StorageClass gcs (provisioner gcsfuse.csi.storage) provisions it a directory of its own, gs://my-bucket/claims/pvc-0f1e/",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q in:\n%s", want, out)
		}
	}
	for _, not := range []string{"ReplicaSet/ns/web-1", "Pod/ns/web-1-abc"} {
		if strings.Contains(out, not) {
			t.Errorf("%s is judged, but its controller's template is:\n%s", not, out)
		}
	}
}
