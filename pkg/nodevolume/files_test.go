package nodevolume

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
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

// NewFiles refuses a configuration that would write files somewhere unintended or with an
// owner that cannot be: a relative kubelet root or mounter directory, a negative uid or gid
// (either alone). It accepts no mounter directory (no shared mode), and a missing log
// becomes the default one while a given log is kept.
func TestNewFilesRefusesBadConfigs(t *testing.T) {
	abs := t.TempDir()
	for _, tc := range []struct {
		name string
		f    Files
		want string // in the error; "" accepted
	}{
		{"relative kubelet root", Files{KubeletRoot: "var/lib/kubelet"}, "kubelet root"},
		{"no kubelet root", Files{}, "kubelet root"},
		{"relative mounter directory", Files{KubeletRoot: abs, MounterDir: "mounter"}, "mounter directory"},
		{"negative uid", Files{KubeletRoot: abs, UID: -1, GID: 0}, "must not be negative"},
		{"negative gid", Files{KubeletRoot: abs, UID: 0, GID: -1}, "must not be negative"},
		{"no mounter directory", Files{KubeletRoot: abs, UID: 1000, GID: 1000}, ""},
		{"everything", Files{KubeletRoot: abs, MounterDir: abs, UID: 1, GID: 2}, ""},
	} {
		got, err := NewFiles(tc.f)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want == "" && (got.KubeletRoot != tc.f.KubeletRoot || got.MounterDir != tc.f.MounterDir || got.UID != tc.f.UID || got.GID != tc.f.GID):
			t.Errorf("%s: NewFiles = %+v, want %+v", tc.name, got, tc.f)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: NewFiles = %v, want an error about the %s", tc.name, err, tc.want)
		}
	}
	def, err := NewFiles(Files{KubeletRoot: abs})
	if err != nil || def.Log == nil {
		t.Fatalf("NewFiles without a log: %+v, %v; want the default log", def, err)
	}
	own := slog.New(slog.NewTextHandler(io.Discard, nil))
	if f, err := NewFiles(Files{KubeletRoot: abs, Log: own}); err != nil || f.Log != own {
		t.Fatalf("NewFiles with a log: %+v, %v; want that log kept", f, err)
	}
}

// The credential files and the CA bundle belong to the sidecar's user and group (gcsfuse
// runs as that user and must read them), whichever directory they go to; files of a volume
// with Application Default Credentials are not written at all.
func TestVolumeFilesOwnedByTheSidecarsUser(t *testing.T) {
	needs.Root(t)
	const uid, gid = 1234, 5678
	kroot, mounter := t.TempDir(), t.TempDir()
	f, err := NewFiles(Files{KubeletRoot: kroot, MounterDir: mounter, UID: uid, GID: gid, CABundle: []byte("pem\n")})
	if err != nil {
		t.Fatal(err)
	}
	tmp := podfiles.TmpDirPath(kroot, "uid-1")
	if err := os.MkdirAll(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	plan := &credentials.Plan{Kind: credentials.KindFederation, Identity: "ksa ns/reader", Token: []byte("tok"),
		TokenExpiry: time.Now().Add(time.Hour), Config: []byte("{}\n")}
	vol := handoff.Volume{Bucket: "bkt", CABundle: true}
	for _, r := range []*Request{
		{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Volume: vol, Creds: plan},
		{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Volume: vol, Creds: plan, Shared: "k1-3"},
	} {
		w, err := f.WriteCredentials(r)
		if err != nil || !w.Token || !w.Config {
			t.Fatalf("WriteCredentials(shared %q) = %+v, %v; want the token and config written", r.Shared, w, err)
		}
		if err := f.WriteCABundle(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{filepath.Join(tmp, "credentials", "data"), filepath.Join(mounter, "credentials", "k1-3")} {
		dirtest.CheckOwned(t, dir, uid, gid, 0o700)
		for _, name := range []string{"token", "credentials.json", "ca.pem"} {
			dirtest.CheckOwned(t, filepath.Join(dir, name), uid, gid, 0o600)
		}
	}
	adc := &Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "adc"}, Creds: &credentials.Plan{Kind: credentials.KindADC}}
	if w, err := f.WriteCredentials(adc); err != nil || w.Token || w.Config {
		t.Fatalf("WriteCredentials of ADC = %+v, %v; want nothing written", w, err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "credentials", "adc")); !os.IsNotExist(err) {
		t.Fatalf("an ADC volume got a credentials directory: %v", err)
	}
}

// A volume with nothing to write (Application Default Credentials, no CA bundle) needs no
// directory. A pod without the gcsfuse-tmp emptyDir (no sidecar injected) gets FailedPrecondition
// saying how to inject it, for its credentials and CA bundle alike; a directory that
// cannot be written is Internal naming the volume and its bucket.
func TestVolumeFilesErrors(t *testing.T) {
	kroot := t.TempDir()
	f, err := NewFiles(Files{KubeletRoot: kroot, MounterDir: filepath.Join(t.TempDir(), "absent"), UID: os.Getuid(), GID: os.Getgid(), CABundle: []byte("pem\n")})
	if err != nil {
		t.Fatal(err)
	}
	plan := &credentials.Plan{Kind: credentials.KindFederation, Identity: "ksa ns/reader", Token: []byte("tok"),
		TokenExpiry: time.Now().Add(time.Hour), Config: []byte("{}\n")}
	// A volume with nothing to write needs no directory.
	adc := &Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Volume: handoff.Volume{Bucket: "bkt"},
		Creds: &credentials.Plan{Kind: credentials.KindADC}}
	if _, err := f.WriteCredentials(adc); err != nil {
		t.Errorf("credentials of an ADC volume: %v, want nothing to write", err)
	}
	if err := f.WriteCABundle(adc); err != nil {
		t.Errorf("CA bundle of a volume without one: %v, want nothing to write", err)
	}
	r := &Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Volume: handoff.Volume{Bucket: "bkt", CABundle: true}, Creds: plan}
	_, werr := f.WriteCredentials(r)
	cerr := f.WriteCABundle(r)
	for _, err := range []error{werr, cerr} {
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "uid-1") || !strings.Contains(err.Error(), "is the sidecar injected") {
			t.Errorf("a pod without the emptyDir: %v, want FailedPrecondition naming the pod and the sidecar", err)
		}
	}
	// Shared, with the mounter's directory missing: Internal.
	shared := *r
	shared.Shared = "k1-3"
	_, werr = f.WriteCredentials(&shared)
	cerr = f.WriteCABundle(&shared)
	for _, err := range []error{werr, cerr} {
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "mounter's directory") {
			t.Errorf("a shared volume without the mounter's directory: %v, want Internal", err)
		}
	}
	// The emptyDir holds a file where the credentials directory goes: Internal.
	tmp := podfiles.TmpDirPath(kroot, "uid-1")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "credentials"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, werr = f.WriteCredentials(r)
	cerr = f.WriteCABundle(r)
	for i, err := range []error{werr, cerr} {
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "volume data (bucket bkt") {
			t.Errorf("write %d into an unusable credentials directory: %v, want Internal naming volume data and bucket bkt", i, err)
		}
	}
	if !strings.Contains(werr.Error(), "ksa ns/reader") {
		t.Errorf("credentials error %v does not name the identity", werr)
	}
	// An emptyDir that is a symlink is not followed: Internal, not FailedPrecondition.
	if err := os.MkdirAll(podfiles.TmpDirPath(kroot, "uid-2"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := podfiles.TmpDirPath(kroot, "uid-2")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tmp, link); err != nil {
		t.Fatal(err)
	}
	if d, err := f.OpenEmptyDir("uid-2"); status.Code(err) != codes.Internal {
		if d != nil {
			d.Close()
		}
		t.Errorf("OpenEmptyDir through a symlink: %v, want Internal", err)
	}
}

// An unpublished target's credential files go, those of the pod's other volumes stay; a
// target that is no kubelet volume path, or whose pod's emptyDir is gone, is left alone.
func TestRemoveCredentialsOfTheTargetsVolumeOnly(t *testing.T) {
	kroot := t.TempDir()
	f, err := NewFiles(Files{KubeletRoot: kroot, UID: os.Getuid(), GID: os.Getgid(), CABundle: []byte("pem\n"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	tmp := podfiles.TmpDirPath(kroot, "uid-1")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	plan := &credentials.Plan{Kind: credentials.KindFederation, Identity: "ksa ns/reader", Token: []byte("tok"),
		TokenExpiry: time.Now().Add(time.Hour), Config: []byte("{}\n")}
	for _, vol := range []string{"data", "logs"} {
		r := &Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: vol}, Volume: handoff.Volume{Bucket: "b", CABundle: true}, Creds: plan}
		if _, err := f.WriteCredentials(r); err != nil {
			t.Fatal(err)
		}
		if err := f.WriteCABundle(r); err != nil {
			t.Fatal(err)
		}
	}
	f.RemoveCredentials(filepath.Join(kroot, "pods", "uid-1", "volumes", "kubernetes.io~csi", "data", "mount"))
	if _, err := os.Stat(filepath.Join(tmp, "credentials", "data")); !os.IsNotExist(err) {
		t.Errorf("the unpublished volume's credentials stayed: %v", err)
	}
	for _, name := range []string{"token", "credentials.json", "ca.pem"} {
		if _, err := os.Stat(filepath.Join(tmp, "credentials", "logs", name)); err != nil {
			t.Errorf("another volume's %s: %v", name, err)
		}
	}
	// No panic, nothing removed: a path that is no target, a pod whose emptyDir is gone.
	f.RemoveCredentials(filepath.Join(kroot, "pods", "uid-1", "volumes", "kubernetes.io~csi", "logs"))
	f.RemoveCredentials(filepath.Join(kroot, "pods", "uid-9", "volumes", "kubernetes.io~csi", "logs", "mount"))
	if _, err := os.Stat(filepath.Join(tmp, "credentials", "logs", "token")); err != nil {
		t.Errorf("another volume's token after removals elsewhere: %v", err)
	}
}
