package audit

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/migration"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// corpusValues are the placeholders' values for the unit tests (the e2e test uses real
// buckets and images).
var corpusValues = map[string]string{
	migration.Bucket: "corpus-bucket", migration.Bucket2: "corpus-bucket-2",
	migration.WorkloadImage: "registry.example/workload:corpus", migration.SidecarImage: "registry.example/sidecar:corpus",
}

// TestCorpus audits every file of the migration corpus (internal/testing/migration) and checks the
// verdict against the file's expectation line: a file expected to run has no refusal, a
// file expected to be refused has a refusal, at admission or at mount (where the e2e test
// looks for it), whose reason contains the expected text. So the corpus, the audit and
// (through the e2e test, which applies the same files) the driver cannot drift apart.
func TestCorpus(t *testing.T) {
	files, err := migration.Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("the corpus has %d files, want at least 20", len(files))
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			inv := NewInventory()
			if err := inv.AddManifest(f.Name, f.Substitute(corpusValues)); err != nil {
				t.Fatal(err)
			}
			rep, err := Run(context.Background(), inv, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, fd := range rep.Findings {
				lines = append(lines, fd.String())
			}
			out := strings.Join(lines, "\n")
			if len(rep.Findings) == 0 {
				t.Fatalf("no finding: the audit did not see the file's volumes")
			}
			if !f.Expect.Refused {
				if rep.Refused() {
					t.Fatalf("expected to run, the audit refuses it:\n%s", out)
				}
				return
			}
			i := slices.IndexFunc(rep.Findings, func(fd Finding) bool {
				return fd.Verdict == Refused && strings.Contains(fd.Detail, f.Expect.Reason)
			})
			if i < 0 {
				t.Fatalf("expected to be refused with %q, the audit says:\n%s", f.Expect.Reason, out)
			}
			switch fd := rep.Findings[i]; {
			case fd.Stage != StageAdmission && fd.Stage != StageMount:
				t.Errorf("refused at %s: the e2e test checks refusals at admission or at mount only", fd.Stage)
			case fd.Stage == StageAdmission && fd.Object.Kind != "Pod":
				t.Errorf("refused at admission in a %s: the e2e test checks admission refusals in bare Pods (their create call's error)", fd.Object.Kind)
			}
		})
	}
}

// TestCorpusShape checks that the corpus is what the e2e test can apply: placeholders for
// buckets and images, only the kinds it creates, the GKE driver's name on every volume
// (the e2e test runs the corpus with the driver installed under that name), a write for
// every file that runs (its object is the proof), and names unique across files (they
// share the e2e test's namespace).
func TestCorpusShape(t *testing.T) {
	files, err := migration.Files()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[Ref]string{} // the e2e test creates every file's objects in one namespace
	for _, f := range files {
		objs, err := Decode(f.Name, f.Substitute(corpusValues))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			r := Ref{Kind: o.Ref.Kind, Name: o.Ref.Name}
			if other, ok := seen[r]; ok && r.Kind != "PersistentVolume" && r.Kind != "StorageClass" { // those two are renamed
				t.Errorf("%s: %s is also in %s", o.Source, r, other)
			}
			seen[r] = o.Source
		}
		if !f.Expect.Refused && !f.Uses(migration.Bucket) {
			t.Errorf("%s: expected to run, but no %s placeholder: its object could not be checked", f.Name, migration.Bucket)
		}
		writes := 0
		for _, o := range objs {
			var spec *corev1.PodSpec
			switch v := o.Value.(type) {
			case *corev1.Pod:
				spec = &v.Spec
			case *appsv1.Deployment:
				spec = &v.Spec.Template.Spec
			case *appsv1.StatefulSet:
				spec = &v.Spec.Template.Spec
			case *batchv1.Job:
				spec = &v.Spec.Template.Spec
			case *corev1.PersistentVolume:
				if v.Spec.CSI == nil || v.Spec.CSI.Driver != contract.IncumbentDriverName {
					t.Errorf("%s: PersistentVolume %s is not of %s", o.Source, v.Name, contract.IncumbentDriverName)
				}
			case *corev1.PersistentVolumeClaim:
			default:
				if o.Ref.Kind != "StorageClass" {
					t.Errorf("%s: kind %s: the e2e test creates Pods, Deployments, StatefulSets, Jobs, PersistentVolumes, PersistentVolumeClaims and StorageClasses", o.Source, o.Ref.Kind)
				}
			}
			if spec == nil {
				continue
			}
			for _, v := range spec.Volumes {
				if v.CSI != nil && v.CSI.Driver != contract.IncumbentDriverName {
					t.Errorf("%s: volume %s is not of %s", o.Source, v.Name, contract.IncumbentDriverName)
				}
			}
			for _, c := range spec.Containers {
				if c.Name == contract.IncumbentSidecarContainerName {
					continue
				}
				if c.Image != corpusValues[migration.WorkloadImage] {
					t.Errorf("%s: container %s: image %s, want the %s placeholder", o.Source, c.Name, c.Image, migration.WorkloadImage)
				}
				if len(c.Args) > 0 && c.Args[0] == "write" {
					writes++
				}
			}
		}
		if !f.Expect.Refused && writes == 0 {
			t.Errorf("%s: expected to run, but no container writes an object the e2e test can check", f.Name)
		}
	}
}

// TestCorpusCoverage checks that the corpus uses every attribute, annotation, volume,
// container name, mount option form and bucket form of the GKE driver that
// docs/migration.md lists, at least once.
func TestCorpusCoverage(t *testing.T) {
	files, err := migration.Files()
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, f := range files {
		all.WriteString(f.Text)
	}
	text := all.String()
	want := []string{
		// volume attributes
		"bucketName:", "mountOptions:", "fileCacheCapacity:", "fileCacheForRangeRead:", "metadataStatCacheCapacity:",
		"metadataTypeCacheCapacity:", "metadataCacheTTLSeconds:", "metadataCacheTtlSeconds:", "enableCloudProfilerForSidecar:",
		"multiNICIndex:", "hostNetworkPodKSA:", "gcsfuseLoggingSeverity:", "gcsfuseMetadataPrefetchOnMount:",
		"skipCSIBucketAccessCheck:", "identityProvider: //iam.googleapis.com/", "identityProvider: https://container.googleapis.com/",
		"identityPool:", "disableMetrics:",
		// annotations
		"gke-gcsfuse/volumes:", "gke-gcsfuse/cpu-limit:", "gke-gcsfuse/cpu-request:", "gke-gcsfuse/memory-limit:",
		"gke-gcsfuse/memory-request:", "gke-gcsfuse/ephemeral-storage-limit:", "gke-gcsfuse/ephemeral-storage-request:",
		"gke-gcsfuse/enable-numa-pinning:", "gke-gcsfuse/metadata-prefetch-memory-limit:",
		// the sidecar's volumes and container
		"name: gke-gcsfuse-buffer", "name: gke-gcsfuse-cache", "name: gke-gcsfuse-tmp", "name: gke-gcsfuse-sidecar",
		// handles and buckets
		"volumeHandle: BUCKET\n", "volumeHandle: BUCKET:", `bucketName: "_"`,
		// mount options: flags, kernel options, the config form of each section
		"implicit-dirs", "uid=", "only-dir=", "read_ahead_kb=", "metadata-cache:ttl-secs:", "metadata-cache:stat-cache-max-size-mb:",
		"metadata-cache:type-cache-max-size-mb:", "file-cache:max-size-mb:", "file-cache:cache-file-for-range-read:",
		"logging:severity:", "gcs-connection:client-protocol:", "write:", "read:", "file-system:",
		// kinds
		"kind: Pod", "kind: Deployment", "kind: StatefulSet", "kind: Job", "kind: PersistentVolume\n", "kind: PersistentVolumeClaim",
		"kind: StorageClass",
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("no corpus file has %q", w)
		}
	}
}
