package audit

import (
	"context"
	"strings"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/migration"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
)

// auditYAML audits one manifest and returns the report and its lines.
func auditYAML(t *testing.T, manifest string) (Report, string) {
	t.Helper()
	inv := NewInventory()
	if err := inv.AddManifest("test.yaml", []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), inv, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, f := range rep.Findings {
		lines = append(lines, f.String())
	}
	return rep, strings.Join(lines, "\n")
}

// pod is a Pod with one inline volume of driver with attrs (YAML lines under
// volumeAttributes), and extra YAML lines under metadata.annotations and spec.
func pod(driver, attrs, annotations, spec string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: ns
  annotations:
    x: "y"
` + annotations + `
spec:
  containers:
    - name: app
      image: app
      volumeMounts: [{name: data, mountPath: /data}]
` + spec + `
  volumes:
    - name: data
      csi:
        driver: ` + driver + `
        volumeAttributes:
          bucketName: bkt
` + attrs + "\n"
}

const gke = "gcsfuse.csi.storage.gke.io"
const ours = "gcsfuse.csi.storage"

// pvAndClaim is a PersistentVolume pv (handle, extra YAML under spec and under csi) with
// claim c bound to it, and a pod using the claim.
func pvAndClaim(name, handle, spec, csi string) string {
	return `apiVersion: v1
kind: PersistentVolume
metadata:
  name: ` + name + `
spec:
  accessModes: [ReadWriteMany]
  capacity: {storage: 1Gi}
` + spec + `
  csi:
    driver: ` + gke + `
    volumeHandle: "` + handle + `"
` + csi + `
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns}
spec:
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 1Gi}}
  volumeName: ` + name + `
  storageClassName: ""
---
apiVersion: v1
kind: Pod
metadata: {name: user, namespace: ns}
spec:
  containers:
    - name: app
      image: app
      volumeMounts: [{name: data, mountPath: /data}]
  volumes:
    - name: data
      persistentVolumeClaim: {claimName: c}
`
}

// TestVerdicts covers each outcome on small manifests: every line listed in want must be
// in the report (substrings of "<object> <scope>: <verdict>: ..."), refused says whether
// the audit fails.
func TestVerdicts(t *testing.T) {
	for _, tt := range []struct {
		name     string
		manifest string
		want     []string
		refused  bool
	}{
		{"our driver, nothing to map", pod(ours, "", "", ""),
			[]string{"Pod/ns/p pod: unchanged: sidecar injected (native)", "Pod/ns/p volume data: unchanged: bucket bkt"}, false},
		{"GKE attributes mapped", pod(gke, `          metadataCacheTTLSeconds: "600"
          gcsfuseLoggingSeverity: warning
          mountOptions: "implicit-dirs,file-cache:max-size-mb:100"`, `    gke-gcsfuse/volumes: "true"
    gke-gcsfuse/memory-limit: 1Gi`, ""),
			[]string{
				"Pod/ns/p pod: mapped: sidecar injected (native); annotation gke-gcsfuse/memory-limit=1Gi -> gcsfuse.csi.storage/memory-limit",
				"Pod/ns/p volume data: mapped: bucket bkt; mount option file-cache:max-size-mb:100 -> --file-cache-max-size-mb=100; gcsfuseLoggingSeverity=warning -> --log-severity=warning; metadataCacheTTLSeconds=600 -> --metadata-cache-ttl-secs=600; driver gcsfuse.csi.storage.gke.io",
			}, false},
		{"accepted GKE attribute asks for nothing", pod(gke, `          skipCSIBucketAccessCheck: "true"`, "", ""),
			[]string{"volume data: mapped: bucket bkt; skipCSIBucketAccessCheck=true -> nothing (this driver makes no bucket access check at mount)"}, false},
		{"cluster identity provider mapped", pod(gke, `          identityProvider: https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/c1`, "", ""),
			[]string{"identityProvider=https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/c1 -> workloadIdentityProvider=identitynamespace:my-project.svc.id.goog:https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/c1",
				"credentials: the pod's service account through identitynamespace:my-project.svc.id.goog:"}, false},
		{"identity pool with the cluster provider", pod(gke, `          identityProvider: https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/c1
          identityPool: other-project.svc.id.goog`, "", ""),
			[]string{"identityPool=other-project.svc.id.goog -> workloadIdentityProvider=identitynamespace:other-project.svc.id.goog:https://"}, false},
		{"multiNICIndex 0 refused at admission", pod(gke, `          multiNICIndex: "0"`, "", ""),
			[]string{`Pod/ns/p volume data: refused: at admission: volume data: volume attribute multiNICIndex (the GKE driver's): value "0": binding gcsfuse to a NIC is not supported`}, true},
		{"bad identity attribute refused with the credentials error", pod(gke, `          identityProvider: https://example.com/not-a-provider`, "", ""),
			[]string{`volume data: refused: at mount: volume data (bucket bkt): volume attribute identityProvider "https://example.com/not-a-provider" (the GKE driver's): want`}, true},
		{"key and federation refused", pod(gke, `          identityProvider: //iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov`, "", "") +
			"        nodePublishSecretRef: {name: key}\n",
			[]string{"refused: at mount: volume data (bucket bkt): the volume has both a nodePublishSecretRef and Workload Identity Federation attributes"}, true},
		{"a key alone", pod(ours, "", "", "") + "        nodePublishSecretRef: {name: key}\n",
			[]string{"volume data: unchanged: bucket bkt; credentials: the service account key of its nodePublishSecretRef (checked at mount)"}, false},
		{"serviceAccount without a provider needs the node plugin's", pod(ours, `          serviceAccount: sa@p-123456.iam.gserviceaccount.com`, "", ""),
			[]string{"refused: at mount: volume data (bucket bkt): volume attributes serviceAccount and tokenURL need Workload Identity Federation"}, true},
		{"both sidecar names denied at admission", pod(gke, "", "", `    - name: gcsfuse-sidecar
      image: a/sidecar:1
    - name: gke-gcsfuse-sidecar
      image: b/sidecar:1`),
			[]string{"Pod/ns/p pod: refused: at admission: the pod has containers named both gcsfuse-sidecar and gke-gcsfuse-sidecar"}, true},
		{"legacy sidecar with an init container reading the bucket denied", pod(ours, "", `    gcsfuse.csi.storage/sidecar-mode: legacy`, "") +
			"  initContainers:\n    - name: init\n      image: app\n      volumeMounts: [{name: data, mountPath: /data}]\n",
			[]string{"pod: refused: at admission: the gcsfuse sidecar cannot serve init container init (volume data)"}, true},
		// A shared volume reads as the pod only with a key or federation: without either, the
		// default chart (no mounter.adcNamespaces) refuses it at admission.
		{"mountMode shared without an identity refused at admission", pod(ours, `          mountMode: shared`, "", ""),
			[]string{`Pod/ns/p pod: refused: at admission: volume data has mountMode: shared and no identity of its own`}, true},
		{"mountMode shared: no sidecar, the node serves the volume", pod(ours, `          mountMode: shared
          workloadIdentityProvider: //iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov`, "", ""),
			[]string{"Pod/ns/p pod: unchanged: no sidecar: the node's shared mounter serves volume data (mountMode: shared)", "Pod/ns/p volume data: unchanged: bucket bkt"}, false},
		{"mountMode shared with the opt-in annotation: no sidecar, a warning", pod(ours, `          mountMode: shared
          workloadIdentityProvider: //iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov`, `    gcsfuse.csi.storage/volumes: "true"`, ""),
			[]string{"Pod/ns/p pod: unchanged: no sidecar: the node's shared mounter serves volume data (mountMode: shared)",
				`Pod/ns/p pod: warning: admission: annotation gcsfuse.csi.storage/volumes: "true" is ignored: the node's shared mounter serves the pod's gcsfuse volumes`}, false},
		{"mountMode shared beside a sidecar volume: the sidecar", pod(ours, `          mountMode: shared
          workloadIdentityProvider: //iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov`, "", "") + `    - name: other
      csi:
        driver: gcsfuse.csi.storage
        volumeAttributes: {bucketName: bkt2}
`, []string{"Pod/ns/p pod: unchanged: sidecar injected (native)"}, false},
		{"an invalid mountMode refused at admission", pod(ours, `          mountMode: node`, "", ""),
			[]string{`Pod/ns/p volume data: refused: at admission: volume data: volume attribute mountMode "node": want "sidecar"`}, true},
		{"opted out: no sidecar, the mount is refused", pod(gke, "", `    gke-gcsfuse/volumes: "false"`, ""),
			[]string{"Pod/ns/p pod: refused: at mount: the webhook injects no gcsfuse sidecar", "pod: warning: admission: the pod mounts gcsfuse.csi.storage.gke.io volume data but opts out"}, true},
		{"the GKE sidecar image lent", pod(gke, "", "", `    - name: gke-gcsfuse-sidecar
      image: gke.gcr.io/gcs-fuse-csi-driver-sidecar-mounter:v1.17.2-gke.0`),
			[]string{"pod: mapped: sidecar injected (native); container gke-gcsfuse-sidecar lends its image gke.gcr.io/gcs-fuse-csi-driver-sidecar-mounter:v1.17.2-gke.0 to the sidecar",
				"pod: refused: at sidecar start: container gke-gcsfuse-sidecar lends the GKE driver's sidecar image"}, true},
		{"both driver names in one pod", pod(gke, "", "", "") + `    - name: other
      csi:
        driver: gcsfuse.csi.storage
        volumeAttributes: {bucketName: bkt2}
`, []string{"pod: refused: at mount: the pod mounts volumes of both gcsfuse.csi.storage and gcsfuse.csi.storage.gke.io"}, true},
		{"GKE buffer and tmp volumes", pod(gke, "", "", "") + "    - name: gke-gcsfuse-buffer\n      emptyDir: {}\n    - name: gke-gcsfuse-tmp\n      emptyDir: {}\n",
			[]string{"volume gke-gcsfuse-buffer -> the sidecar's write buffer (/gcsfuse-buffer)", "pod: warning: volume gke-gcsfuse-tmp (the GKE driver's sidecar tmp volume) has no equivalent"}, false},
		{"a pod without the driver", `apiVersion: v1
kind: Pod
metadata: {name: plain}
spec:
  containers: [{name: app, image: app}]
  volumes: [{name: v, emptyDir: {}}]
`, nil, false},
		{"bucket:suffix handle mapped", pvAndClaim("pv1", "bkt:data", "", ""),
			[]string{"PersistentVolume/pv1: mapped: bucket bkt; volumeHandle bkt:data -> bucket bkt",
				"Pod/ns/user volume data: mapped: claim c -> PersistentVolume pv1; bucket bkt; volumeHandle bkt:data -> bucket bkt",
				"Pod/ns/user pod: unchanged: sidecar injected (native)"}, false},
		{"a handle suffix that is not a label", pvAndClaim("pv1", "bkt:a/b", "", ""),
			[]string{`PersistentVolume/pv1: refused: at mount: volume pv1: volume handle "bkt:a/b": the part after the first ':' ("a/b") must be a label`}, true},
		{"a PersistentVolume name with dots (a DNS-1123 subdomain)", pvAndClaim("pv.one", "bkt", "", ""),
			[]string{"PersistentVolume/pv.one: unchanged: bucket bkt",
				"Pod/ns/user volume data: unchanged: claim c -> PersistentVolume pv.one; bucket bkt",
				"Pod/ns/user pod: unchanged: sidecar injected (native)"}, false},
		{"a PersistentVolume name too long for the hand-off socket", pvAndClaim("pv-"+strings.Repeat("x", 61), "bkt", "", ""),
			[]string{`PersistentVolume/pv-` + strings.Repeat("x", 61) + `: refused: at mount: target_path: volume name "pv-` + strings.Repeat("x", 61) + `": want a DNS-1123 label or subdomain (a pod volume's or a PersistentVolume's name) of at most 63 characters (the kubelet names the volume's directory after it)`}, true},
		{"block volume mode", pvAndClaim("pv1", "bkt", "  volumeMode: Block", ""),
			[]string{"PersistentVolume/pv1: refused: at mount: volume_capability: block access is not supported"}, true},
		{"an fsType", pvAndClaim("pv1", "bkt", "", "    fsType: ext4"),
			[]string{`PersistentVolume/pv1: refused: at mount: volume_capability.mount.fs_type "ext4" is not supported`}, true},
		{"PersistentVolume mount options", pvAndClaim("pv1", "bkt", "  mountOptions: [implicit-dirs, \"metadata-cache:ttl-secs:-1\"]", ""),
			[]string{"PersistentVolume/pv1: mapped: bucket bkt; mount option metadata-cache:ttl-secs:-1 -> --metadata-cache-ttl-secs=-1"}, false},
		{"a profile StorageClass named on a PersistentVolume", pvAndClaim("pv1", "bkt", "  storageClassName: gcsfusecsi-serving", ""),
			[]string{"PersistentVolume/pv1: warning: storageClassName gcsfusecsi-serving: the GKE driver applies that class's mountOptions and parameters"}, false},
		{"a class of the GKE driver's name that names no bucket", `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: gcs}
provisioner: gcsfuse.csi.storage.gke.io
parameters: {skipCSIBucketAccessCheck: "true"}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns}
spec: {storageClassName: gcs}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: s, namespace: ns}
spec:
  template:
    spec:
      containers: [{name: app, image: app}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {storageClassName: gcs}
`, []string{"StorageClass/gcs: warning: provisioner gcsfuse.csi.storage.gke.io: with this driver installed under that name, its controller refuses the claims of this class that no PersistentVolume binds: StorageClass gcs: StorageClass parameter bucketName is required",
			"PersistentVolumeClaim/ns/c: refused: at provisioning: no PersistentVolume binds it: StorageClass gcs (provisioner gcsfuse.csi.storage.gke.io) refuses to provision it: StorageClass gcs: StorageClass parameter bucketName is required",
			"StatefulSet/ns/s volume data: refused: at provisioning: volumeClaimTemplate data (a claim per replica): StorageClass gcs (provisioner gcsfuse.csi.storage.gke.io) refuses to provision it: StorageClass gcs: StorageClass parameter bucketName is required"}, true},
		{"a claim not in the input", `apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {gke-gcsfuse/volumes: "true"}}
spec:
  containers: [{name: app, image: app}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: elsewhere}}]
`, []string{"Pod/p pod: note: volume v: claim elsewhere is not in the input"}, false},
		{"a kind the audit does not read", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", []string{"Service/s: note: skipped: the audit reads no Service"}, false},
		{"a pod already injected (read back from a cluster)", pod(ours, "", `    gcsfuse.csi.storage/injected: native`, "") +
			"  initContainers:\n    - name: gcsfuse-sidecar\n      image: s\n      restartPolicy: Always\n      env: [{name: GCSFUSE_SIDECAR_MODE, value: native}]\n",
			[]string{"Pod/ns/p pod: unchanged: sidecar already injected (native), kept"}, false},
		{"workload templates", `apiVersion: batch/v1
kind: CronJob
metadata: {name: cj}
spec:
  schedule: "@daily"
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: app, image: app}]
          volumes: [{name: v, csi: {driver: gcsfuse.csi.storage.gke.io, volumeAttributes: {bucketName: bkt}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds}
spec:
  template:
    spec:
      containers: [{name: app, image: app}]
      volumes: [{name: v, csi: {driver: gcsfuse.csi.storage.gke.io, volumeAttributes: {bucketName: "_"}}}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs}
spec:
  template:
    spec:
      containers: [{name: app, image: app}]
      volumes: [{name: v, csi: {driver: gcsfuse.csi.storage.gke.io, volumeAttributes: {bucketName: bkt, multiNICIndex: "-1"}}}]
`, []string{"CronJob/cj volume v: unchanged: bucket bkt", "DaemonSet/ds volume v: refused: at admission: volume v: bucket name \"_\" (gcsfuse's all-buckets mode) is not supported",
			"ReplicaSet/rs volume v: mapped: bucket bkt; multiNICIndex=-1 -> nothing (a negative index binds no NIC)"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep, out := auditYAML(t, tt.manifest)
			checkReport(t, rep, out, tt.want, tt.refused)
		})
	}
}

// A claim that only its volume's claimRef binds (no volumeName), applied with the volume
// and the pod: the webhook finds the volume by its claimRef at the pod's admission, before
// the PV controller binds the two, so the pod gets the sidecar and nothing is said of the
// claim. A claimRef of another claim's UID binds nothing.
func TestClaimBoundByClaimRefOnly(t *testing.T) {
	manifest := func(refUID, claimUID string) string {
		return `apiVersion: v1
kind: PersistentVolume
metadata: {name: pv1}
spec:
  claimRef: {name: c, namespace: ns, uid: "` + refUID + `"}
  csi: {driver: gcsfuse.csi.storage, volumeHandle: bkt}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns, uid: "` + claimUID + `"}
spec: {storageClassName: ""}
---
apiVersion: v1
kind: Pod
metadata: {name: user, namespace: ns}
spec:
  containers: [{name: app, image: app, volumeMounts: [{name: data, mountPath: /data}]}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: c}}]
`
	}
	for _, uids := range [][2]string{{"", ""}, {"u1", "u1"}, {"", "u1"}} {
		rep, out := auditYAML(t, manifest(uids[0], uids[1]))
		for _, w := range []string{"PersistentVolume/pv1: unchanged: bucket bkt",
			"Pod/ns/user volume data: unchanged: claim c -> PersistentVolume pv1; bucket bkt",
			"Pod/ns/user pod: unchanged: sidecar injected (native)"} {
			if !strings.Contains(out, w) {
				t.Errorf("claimRef uid %q, claim uid %q: no line has %q; the report:\n%s", uids[0], uids[1], w, out)
			}
		}
		if strings.Contains(out, "PersistentVolumeClaim/ns/c") || rep.Count(Warning) > 0 {
			t.Errorf("claimRef uid %q, claim uid %q: a finding on the claim, or a warning; the report:\n%s", uids[0], uids[1], out)
		}
	}
	if _, out := auditYAML(t, manifest("u-old", "u-new")); strings.Contains(out, "sidecar injected") {
		t.Errorf("a claimRef of another UID bound the claim; the report:\n%s", out)
	}
}

// TestSummary: the counts, and the GKE driver name's requirement said once.
func TestSummary(t *testing.T) {
	// A volume refused at mount (its identity), in a pod admitted with a mapped annotation.
	rep, _ := auditYAML(t, pod(gke, `          identityPool: "p.svc.id.goog"`, `    gke-gcsfuse/volumes: "true"`, ""))
	want := "driver gcsfuse.csi.storage.gke.io: 1 volumes use the GKE driver's name: install this driver under it (Helm: --set driverName=gcsfuse.csi.storage.gke.io, docs/migration.md) or set their driver to gcsfuse.csi.storage\n" +
		"summary: 0 unchanged, 1 mapped, 1 refused, 0 warnings, 0 notes"
	if got := rep.Summary(); got != want {
		t.Errorf("Summary() =\n%s\nwant\n%s", got, want)
	}
	rep, _ = auditYAML(t, pod(ours, "", "", ""))
	if got := rep.Summary(); got != "summary: 2 unchanged, 0 mapped, 0 refused, 0 warnings, 0 notes" {
		t.Errorf("Summary() = %s", got)
	}
}

// TestDecode: JSON and YAML inputs, lists, and the errors that name the input and line.
func TestDecode(t *testing.T) {
	objs, err := Decode("a.json", []byte(`{"apiVersion":"v1","kind":"List","items":[
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1"}},
{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc"}}]}
[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p2"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 || objs[0].Ref.Name != "p1" || objs[1].Value != nil || objs[2].Ref.Name != "p2" || objs[2].Source != "a.json:4" {
		t.Fatalf("objects %+v", objs)
	}
	objs, err = Decode("a.yaml", []byte("# comment only\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p1}\n--- \n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p2}\n...\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Source != "a.yaml:3" || objs[1].Source != "a.yaml:8" {
		t.Fatalf("objects %+v", objs)
	}
	for _, tt := range []struct{ name, in, want string }{
		{"b.yaml", "apiVersion: v1\nkind: Pod\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: [x\n", "b.yaml:"},
		{"c.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n    bad: indent\n", "c.yaml:5: not YAML"},
		{"d.json", "{\"apiVersion\": \"v1\",\n\"kind\": \"Pod\",\n}", "d.json:3: not JSON"},
		{"e.yaml", "just: a map\n", "e.yaml:1: not a Kubernetes object: no kind or apiVersion"},
		{"f.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: three}\n", "f.yaml:1: Deployment d:"},
		{"g.yaml", "- a\n- b\n", "g.yaml:1: not a Kubernetes object"},
		{"h.yaml", "\x00\x01binary", "h.yaml:1"},
	} {
		if _, err := Decode(tt.name, []byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Decode(%s) error %v, want one containing %q", tt.name, err, tt.want)
		}
	}
}

// FuzzDecode: no input makes the decoder or the audit panic.
func FuzzDecode(f *testing.F) {
	files, err := migration.Files()
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range files {
		f.Add(c.Substitute(corpusValues))
	}
	f.Add([]byte(pod(gke, `          multiNICIndex: "0"`, "", "")))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod"}]}`))
	f.Add([]byte("---\n--- x\n...\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv := NewInventory()
		if inv.AddManifest("fuzz.yaml", data) != nil {
			return
		}
		if _, err := Run(context.Background(), inv, Options{}); err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
}

// TestInlineRefusalSaidOnce: an inline volume the webhook denies is one refusal, at
// admission, on the volume's line: the pod's admission line does not repeat it, and no
// injection is reported for a pod that is not admitted.
func TestInlineRefusalSaidOnce(t *testing.T) {
	rep, out := auditYAML(t, pod(gke, `          multiNICIndex: "0"`, "", ""))
	var refused []Finding
	for _, f := range rep.Findings {
		if f.Verdict == Refused {
			refused = append(refused, f)
		}
		if f.Scope == "pod" && f.Verdict != Refused && strings.Contains(f.Detail, "sidecar injected") {
			t.Errorf("injection reported for a denied pod:\n%s", out)
		}
	}
	if len(refused) != 1 || refused[0].Scope != "volume data" || refused[0].Stage != StageAdmission {
		t.Fatalf("want one refusal, of volume data, at admission; the report:\n%s", out)
	}
}

// A claim of the input not bound yet is resolved, as the webhook resolves it, through its
// StorageClass in the input (the default one for a claim without storageClassName): one
// of the driver's is its volume, so an init container mounting it gets no "not bound"
// warning; without the class the claim stays unresolved and the warning says so.
func TestPendingClaimThroughItsClass(t *testing.T) {
	const class = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: gcs
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: gcsfuse.csi.storage
parameters: {bucketName: bkt}
---
`
	const podAndClaim = `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: c, namespace: ns}
spec: {}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns}
spec:
  initContainers: [{name: warmup, image: app, volumeMounts: [{name: claimed, mountPath: /c}]}]
  containers: [{name: app, image: app}]
  volumes:
    - {name: data, csi: {driver: gcsfuse.csi.storage, volumeAttributes: {bucketName: bkt}}}
    - {name: claimed, persistentVolumeClaim: {claimName: c}}
`
	const notBound = "Pod/ns/p pod: warning: admission: volume claimed: claim c is not bound to a volume yet"
	if _, out := auditYAML(t, class+podAndClaim); strings.Contains(out, notBound) || !strings.Contains(out, "Pod/ns/p pod: unchanged: sidecar injected (native)") {
		t.Errorf("the claim of the driver's default class was not resolved; the report:\n%s", out)
	}
	if _, out := auditYAML(t, podAndClaim); !strings.Contains(out, notBound) {
		t.Errorf("no line has %q; the report:\n%s", notBound, out)
	}
}

// checkReport checks an audit report (rep, printed as out): a line with each of want, no
// finding at all when want is nil (a manifest without the driver), and whether it refuses.
func checkReport(t *testing.T, rep Report, out string, want []string, refused bool) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("no line has %q; the report:\n%s", w, out)
		}
	}
	if want == nil && len(rep.Findings) > 0 {
		t.Errorf("findings for a manifest without the driver:\n%s", out)
	}
	if rep.Refused() != refused {
		t.Errorf("Refused() = %v, want %v; the report:\n%s", rep.Refused(), refused, out)
	}
}

// The installed chart's shared-mode settings change the verdict on a shared volume with no
// identity of its own: refused by the default chart, accepted where the chart lets the
// namespace read with the mounter's credentials or federates every shared volume.
func TestAuditSharedSettings(t *testing.T) {
	adc, err := credentials.ParseSharedADC("team-*")
	if err != nil {
		t.Fatal(err)
	}
	other, err := credentials.ParseSharedADC("other-*")
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.ReplaceAll(pod(ours, `          mountMode: shared`, "", ""), "namespace: ns", "namespace: team-a")
	for name, tc := range map[string]struct {
		opts    Options
		refused bool
	}{
		"default chart":           {Options{}, true},
		"namespace allowed ADC":   {Options{SharedADC: adc}, false},
		"another namespace's ADC": {Options{SharedADC: other}, true},
		"every shared volume WIF": {Options{SharedFederated: true}, false},
	} {
		inv := NewInventory()
		if err := inv.AddManifest("test.yaml", []byte(manifest)); err != nil {
			t.Fatal(err)
		}
		rep, err := Run(context.Background(), inv, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Refused() != tc.refused {
			t.Errorf("%s: refused = %v, want %v: %v", name, rep.Refused(), tc.refused, rep.Findings)
		}
	}
}

// hostNetworkPodKSA "true" asks for the pod's own identity: with federation it is what every
// pod gets here; without, a hostNetwork pod would read as the node, so the audit says
// "refused" (the webhook's 403), never "mapped -> nothing" alone.
func TestAuditHostNetworkPodKSA(t *testing.T) {
	rep, lines := auditYAML(t, pod(ours, `          bucketName: bkt
          hostNetworkPodKSA: "true"`, "", `  hostNetwork: true`))
	if !rep.Refused() || !strings.Contains(lines, "refused: at admission") || !strings.Contains(lines, "read as its own Kubernetes service account") {
		t.Errorf("hostNetwork without federation: refused %v, findings:\n%s", rep.Refused(), lines)
	}
	// The chart's node.wifProvider (kubectl gcsfuse audit --node-federated): admitted.
	inv := NewInventory()
	if err := inv.AddManifest("test.yaml", []byte(pod(ours, `          bucketName: bkt
          hostNetworkPodKSA: "true"`, "", `  hostNetwork: true`))); err != nil {
		t.Fatal(err)
	}
	if rep, err := Run(context.Background(), inv, Options{NodeFederated: true}); err != nil || rep.Refused() {
		t.Errorf("hostNetwork, the node plugin federating: refused %v (%v), findings %+v", rep.Refused(), err, rep.Findings)
	}
	rep, lines = auditYAML(t, pod(ours, `          bucketName: bkt
          hostNetworkPodKSA: "true"
          identityProvider: https://container.googleapis.com/v1/projects/my-project/locations/us-central1/clusters/prod-1`, "", `  hostNetwork: true`))
	if rep.Refused() || strings.Contains(lines, "warning") || !strings.Contains(lines, "reads as its own service account") {
		t.Errorf("with federation: refused %v, findings:\n%s", rep.Refused(), lines)
	}
}

// A pod naming its credential ConfigMap (the GKE driver's annotation) is judged with the
// ConfigMap among the manifests, as the webhook would admit it; without it, with a warning
// that it was not checked; with one the sidecar could not honour, refused with the
// webhook's words.
func TestAuditCredentialConfigMap(t *testing.T) {
	const cm = `apiVersion: v1
kind: ConfigMap
metadata: {name: wif}
data:
  credential-configuration.json: |
    {"type": "external_account", "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool-1/providers/k8s-1",
     "subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": "https://sts.googleapis.com/v1/token",
     "credential_source": {"file": "/var/run/service-account/token"}}
---
`
	p := pod(ours, `          bucketName: bkt`, `    gke-gcsfuse/workload-identity-credential-configmap: wif`, "")
	rep, lines := auditYAML(t, cm+p)
	if rep.Refused() || !strings.Contains(lines, "workload-identity-credential-configmap=wif -> gcsfuse.csi.storage/workload-identity-credential-configmap") {
		t.Errorf("with the ConfigMap: refused %v, findings:\n%s", rep.Refused(), lines)
	}
	// Not among the manifests (kubectl create configmap made it): judged, and said unchecked.
	rep, lines = auditYAML(t, p)
	if rep.Refused() || !strings.Contains(lines, "ConfigMap ns/wif is not among the objects audited: its content was not checked") {
		t.Errorf("without the ConfigMap: refused %v, findings:\n%s", rep.Refused(), lines)
	}
	rep, lines = auditYAML(t, strings.Replace(cm, `"file": "/var/run/service-account/token"`, `"url": "http://169.254.169.254/token"`, 1)+p)
	if !rep.Refused() || !strings.Contains(lines, "credential_source must be an object with file") {
		t.Errorf("a URL source: refused %v, findings:\n%s", rep.Refused(), lines)
	}
}
