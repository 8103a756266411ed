package nodevolume

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// A shared volume's credential files go to the node mounter's directory under the mount's
// name, where the mounter's gcsfuse reads them (its configuration names that token file);
// a pod volume's go to the pod's emptyDir under the volume's name.
func TestCredentialFilesWhereTheirGcsfuseReadsThem(t *testing.T) {
	kroot, mounter := t.TempDir(), t.TempDir()
	f, err := NewFiles(Files{KubeletRoot: kroot, MounterDir: mounter, UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	plan := &credentials.Plan{Kind: credentials.KindFederation, Identity: "ksa ns/reader", Token: []byte("tok"),
		TokenExpiry: time.Now().Add(time.Hour), Config: []byte("{}\n")}
	shared := &Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Creds: plan, Shared: "k1-3"}
	if _, err := f.WriteCredentials(shared); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mounter, "credentials", "k1-3", "token")); err != nil || string(b) != "tok" {
		t.Fatalf("shared volume's token in the mounter's directory under its mount: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(mounter, "credentials", "data")); !os.IsNotExist(err) {
		t.Fatalf("shared volume's files under the pod's volume name: %v", err)
	}
	tmp := podfiles.TmpDirPath(kroot, "uid-1")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	own := &Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Creds: plan}
	if _, err := f.WriteCredentials(own); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(tmp, "credentials", "data", "token")); err != nil || string(b) != "tok" {
		t.Fatalf("pod volume's token in its emptyDir under the volume's name: %q %v", b, err)
	}
}

// The driver's extra CA bundle is written beside a volume's credentials only when the volume
// carries it (its hand-off says caBundle: true): the sidecar then builds gcsfuse's roots from
// that file, and a volume without it never gets one.
func TestCABundleWrittenForTheVolumesThatCarryIt(t *testing.T) {
	kroot := t.TempDir()
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	f, err := NewFiles(Files{KubeletRoot: kroot, MounterDir: t.TempDir(), UID: os.Getuid(), GID: os.Getgid(), CABundle: pem})
	if err != nil {
		t.Fatal(err)
	}
	tmp := podfiles.TmpDirPath(kroot, "uid-1")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	with := &Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "with"}, Volume: handoff.Volume{Bucket: "b", CABundle: true}}
	without := &Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "without"}, Volume: handoff.Volume{Bucket: "b"}}
	for _, r := range []*Request{with, without} {
		if err := f.WriteCABundle(r); err != nil {
			t.Fatalf("%s: %v", r.Target.VolumeName, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(tmp, "credentials", "with", "ca.pem")); err != nil || string(b) != string(pem) {
		t.Fatalf("the CA bundle of a volume that carries it: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "credentials", "without")); !os.IsNotExist(err) {
		t.Fatalf("a volume without the CA bundle got files: %v", err)
	}
}
