package audit

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// class is a StorageClass named name of the driver's name, with extra YAML lines at its top
// level (parameters, reclaimPolicy, mountOptions).
func class(name, provisioner, extra string) string {
	return `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: ` + name + `}
provisioner: ` + provisioner + `
` + extra + `
---
`
}

// goodClass provisions directories under claims/ in bkt and keeps them.
var goodClass = class("gcs", ours, "reclaimPolicy: Retain\nparameters: {bucketName: bkt, pathPrefix: claims}")

// badClass names a parameter the node plugin does not accept.
var badClass = class("bad", ours, "parameters: {bucketName: bkt, bogus: \"1\"}")

// TestProvisioning: a class of the driver, a claim no PersistentVolume binds, a
// StatefulSet's volumeClaimTemplate and a pod's generic ephemeral volume are judged by the
// provisioner's own check (classparams.CheckClaim) and then the node plugin's, each with the
// directory the claim gets or the reason it is refused.
func TestProvisioning(t *testing.T) {
	for _, tt := range []struct {
		name     string
		manifest string
		want     []string
		not      []string
		refused  bool
	}{
		{"a class", goodClass, []string{
			"StorageClass/gcs: unchanged: provisioner gcsfuse.csi.storage: each claim gets its own directory gs://bkt/claims/<volume>/ (reclaim policy Retain: the directory and its objects are kept when the claim is deleted)"},
			nil, false},
		{"a class with the default reclaim policy and a GKE attribute", class("gcs", ours, `parameters: {bucketName: bkt, metadataCacheTTLSeconds: "600"}`), []string{
			"StorageClass/gcs: mapped: provisioner gcsfuse.csi.storage: each claim gets its own directory gs://bkt/<volume>/ (reclaim policy Delete: its objects are deleted when the claim is); metadataCacheTTLSeconds=600 -> --metadata-cache-ttl-secs=600"},
			nil, false},
		{"a class with an unknown parameter", badClass, []string{
			`StorageClass/bad: refused: at provisioning: provisioner gcsfuse.csi.storage: claims of this class are refused when provisioned: StorageClass bad: StorageClass parameters: unknown volume attribute "bogus"`},
			nil, true},
		{"a class whose mountOptions field is refused", class("gcs", ours, "parameters: {bucketName: bkt}\nmountOptions: [no-such-option]"), []string{
			`StorageClass/gcs: refused: at provisioning: provisioner gcsfuse.csi.storage: claims of this class are refused when provisioned: StorageClass gcs: mount option "no-such-option"`},
			nil, true},
		{"a class whose volumes are refused at mount", class("gcs", ours, "parameters: {bucketName: bkt, serviceAccount: sa@p.iam.gserviceaccount.com}"), []string{
			"StorageClass/gcs: refused: at mount: provisioner gcsfuse.csi.storage: claims of this class are provisioned, and their volumes refused at mount: "},
			nil, true},
		{"a class of the GKE driver's name that names a bucket", class("gcs", gke, "parameters: {bucketName: bkt}"), []string{
			"StorageClass/gcs: unchanged: provisioner gcsfuse.csi.storage.gke.io: with this driver installed under that name, each claim gets its own directory gs://bkt/<volume>/ (reclaim policy Delete"},
			nil, false},
		{"a class of the GKE driver's name that names a bucket but a bad parameter", class("gcs", gke, "parameters: {bucketName: bkt, bogus: \"1\"}"), []string{
			`StorageClass/gcs: refused: at provisioning: provisioner gcsfuse.csi.storage.gke.io: with this driver installed under that name, claims of this class are refused when provisioned: StorageClass gcs: StorageClass parameters: unknown volume attribute "bogus"`},
			nil, true},
		{"a claim of the default class", strings.Replace(goodClass, "metadata: {name: gcs}", "metadata: {name: gcs, annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}}", 1) + `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns}
spec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 1Gi}}}
`, []string{
			"PersistentVolumeClaim/ns/c: unchanged: no PersistentVolume binds it: StorageClass gcs (provisioner gcsfuse.csi.storage) provisions it a directory of its own, gs://bkt/claims/<volume>/ (reclaim policy Retain"},
			[]string{"refused"}, false},
		{"a claim in volumeMode Block", goodClass + `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns}
spec: {storageClassName: gcs, volumeMode: Block}
`, []string{
			"PersistentVolumeClaim/ns/c: refused: at provisioning: no PersistentVolume binds it: StorageClass gcs (provisioner gcsfuse.csi.storage) refuses to provision it: volumeMode Block: a bucket directory is a file system; use volumeMode Filesystem; it stays Pending"},
			nil, true},
		{"a claim to clone", goodClass + `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns}
spec: {storageClassName: gcs, dataSource: {kind: PersistentVolumeClaim, name: other}}
`, []string{
			"PersistentVolumeClaim/ns/c: refused: at provisioning: no PersistentVolume binds it: StorageClass gcs (provisioner gcsfuse.csi.storage) refuses to provision it: dataSource: this driver cannot clone or restore a volume"},
			nil, true},
		{"a pod of a pending claim", goodClass + `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns}
spec: {storageClassName: gcs}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  containers: [{name: app, image: app, volumeMounts: [{name: data, mountPath: /data}]}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: c}}]
`, []string{
			"Pod/ns/p pod: unchanged: sidecar injected (native)",
			"Pod/ns/p volume data: unchanged: claim c: StorageClass gcs (provisioner gcsfuse.csi.storage) provisions it a directory of its own, gs://bkt/claims/<volume>/"},
			nil, false},
		{"a StatefulSet's volumeClaimTemplate", goodClass + `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns}
spec:
  template:
    spec:
      containers: [{name: app, image: app, volumeMounts: [{name: data, mountPath: /data}]}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {storageClassName: gcs, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
    - metadata: {name: other}
      spec: {storageClassName: standard}
`, []string{
			"StatefulSet/ns/s pod: unchanged: sidecar injected (native)",
			"StatefulSet/ns/s volume data: unchanged: volumeClaimTemplate data (a claim per replica): StorageClass gcs (provisioner gcsfuse.csi.storage) provisions it a directory of its own, gs://bkt/claims/<volume>/ (reclaim policy Retain: the directory and its objects are kept when the claim is deleted)"},
			[]string{"volume other", "refused"}, false},
		{"a StatefulSet's volumeClaimTemplate in volumeMode Block", goodClass + `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns}
spec:
  template:
    spec:
      containers: [{name: app, image: app}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {storageClassName: gcs, volumeMode: Block}
`, []string{
			"StatefulSet/ns/s volume data: refused: at provisioning: volumeClaimTemplate data (a claim per replica): StorageClass gcs (provisioner gcsfuse.csi.storage) refuses to provision it: volumeMode Block"},
			nil, true},
		{"a generic ephemeral volume of a class", goodClass + `apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ns}
spec:
  template:
    spec:
      containers: [{name: app, image: app, volumeMounts: [{name: scratch, mountPath: /s}]}]
      volumes:
        - name: scratch
          ephemeral: {volumeClaimTemplate: {spec: {storageClassName: gcs, accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}}
`, []string{
			"Deployment/ns/d pod: unchanged: sidecar injected (native)",
			"Deployment/ns/d volume scratch: unchanged: ephemeral claim: StorageClass gcs (provisioner gcsfuse.csi.storage) provisions it a directory of its own, gs://bkt/claims/<volume>/"},
			nil, false},
		{"a generic ephemeral volume of a refused class", badClass + `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  containers: [{name: app, image: app, volumeMounts: [{name: scratch, mountPath: /s}]}]
  volumes:
    - name: scratch
      ephemeral: {volumeClaimTemplate: {spec: {storageClassName: bad}}}
`, []string{
			"Pod/ns/p pod: unchanged: sidecar injected (native)",
			`Pod/ns/p volume scratch: refused: at provisioning: ephemeral claim: StorageClass bad (provisioner gcsfuse.csi.storage) refuses to provision it: StorageClass bad: StorageClass parameters: unknown volume attribute "bogus" (supported: bucketName, mountOptions, fileCacheCapacity, mountMode, workloadIdentityProvider, serviceAccount, tokenURL, identityProvider, identityPool; and the GKE driver's disableMetrics, enableCloudProfilerForSidecar, fileCacheForRangeRead, gcsfuseLoggingSeverity, gcsfuseMetadataPrefetchOnMount, hostNetworkPodKSA, metadataCacheTTLSeconds, metadataCacheTtlSeconds, metadataStatCacheCapacity, metadataTypeCacheCapacity, multiNICIndex, skipCSIBucketAccessCheck); it stays Pending`},
			nil, true},
		{"a generic ephemeral volume of another provisioner's class", class("std", "pd.csi.storage.gke.io", "") + `apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  containers: [{name: app, image: app}]
  volumes: [{name: scratch, ephemeral: {volumeClaimTemplate: {spec: {storageClassName: std}}}}]
`, nil, nil, false},
		{"a PersistentVolume the driver provisioned", goodClass + `apiVersion: v1
kind: PersistentVolume
metadata: {name: pvc-1, annotations: {pv.kubernetes.io/provisioned-by: gcsfuse.csi.storage}}
spec:
  storageClassName: gcs
  csi: {driver: gcsfuse.csi.storage, volumeHandle: "bkt:claims/pvc-1", volumeAttributes: {bucketName: bkt, mountOptions: only-dir=claims/pvc-1}}
`, []string{"PersistentVolume/pvc-1: unchanged: bucket bkt; gcsfuse --only-dir=claims/pvc-1"},
			[]string{"warning"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep, out := auditYAML(t, tt.manifest)
			checkReport(t, rep, out, tt.want, tt.refused)
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("a line has %q; the report:\n%s", n, out)
				}
			}
		})
	}
}

// TestProvisioningCountsVolumes: a claim, a volumeClaimTemplate and a generic ephemeral
// volume of a class of the GKE driver's name are volumes of that name (the summary counts
// them), a class is not.
func TestProvisioningCountsVolumes(t *testing.T) {
	rep, out := auditYAML(t, class("gcs", gke, "parameters: {bucketName: bkt}")+`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns}
spec: {storageClassName: gcs}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns}
spec:
  template: {spec: {containers: [{name: app, image: app}]}}
  volumeClaimTemplates: [{metadata: {name: data}, spec: {storageClassName: gcs}}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  containers: [{name: app, image: app}]
  volumes: [{name: scratch, ephemeral: {volumeClaimTemplate: {spec: {storageClassName: gcs}}}}]
`)
	if rep.IncumbentVolumes != 3 || rep.Refused() {
		t.Errorf("IncumbentVolumes = %d, want 3 (claim, template, ephemeral), nothing refused; the report:\n%s", rep.IncumbentVolumes, out)
	}
	if !strings.Contains(out, "Pod/ns/p volume scratch: unchanged: ephemeral claim: StorageClass gcs (provisioner gcsfuse.csi.storage.gke.io) provisions it a directory of its own, gs://bkt/<volume>/ (reclaim policy Delete: its objects are deleted when the claim is); driver gcsfuse.csi.storage.gke.io") {
		t.Errorf("the ephemeral volume's line; the report:\n%s", out)
	}
}

// TestProvisioningClaimFromCluster: a claim read back from a cluster has a uid, so the audit
// names the directory it gets, pvc-<uid>, as the provisioner does.
func TestProvisioningClaimFromCluster(t *testing.T) {
	name := "gcs"
	inv := NewInventory()
	for _, o := range []any{
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: ours, Parameters: map[string]string{"bucketName": "bkt", "pathPrefix": "claims"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "1234-abcd"}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &name}},
	} {
		if err := inv.Add("cluster", o); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Run(context.Background(), inv, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := "PersistentVolumeClaim/ns/c: unchanged: no PersistentVolume binds it: StorageClass gcs (provisioner gcsfuse.csi.storage) provisions it a directory of its own, gs://bkt/claims/pvc-1234-abcd/ (reclaim policy Delete: its objects are deleted when the claim is)"
	if len(rep.Findings) != 2 || rep.Findings[1].String() != want {
		t.Errorf("findings %v, want the second to be\n%s", rep.Findings, want)
	}
}
