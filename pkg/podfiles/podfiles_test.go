package podfiles

import (
	"errors"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Present says yes only to a regular exit file: a symlink planted under the name (which the
// sidecar would not read) does not count as the sidecar having been told.
func TestPresent(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	check := func(want bool, when string) {
		t.Helper()
		if got, err := Present(d); err != nil || got != want {
			t.Fatalf("%s: Present() = %v, %v; want %v", when, got, err, want)
		}
	}
	check(false, "empty dir")
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, At(dir).ExitFile()); err != nil {
		t.Fatal(err)
	}
	check(false, "symlink under the name")
	if err := WriteIn(d, Reason{Rule: "r"}); err != nil {
		t.Fatal(err)
	}
	check(true, "after WriteIn")
	if r, err := Read(d); err != nil || r.Rule != "r" {
		t.Fatalf("Read() = %+v, %v", r, err)
	}
}

func TestTerminatingRoundTrip(t *testing.T) {
	d, _ := dirtest.Pinned(t)
	if _, err := ReadTerminating(d); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want ErrNotExist", err)
	}
	ts := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := WriteTerminating(d, Terminating{GraceSeconds: 45, DeletionTimestamp: ts}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTerminating(d)
	if err != nil {
		t.Fatal(err)
	}
	if got.GraceSeconds != 45 || !got.DeletionTimestamp.Equal(ts) || got.Grace() != 45*time.Second {
		t.Fatalf("read back %+v", got)
	}
	if err := WriteTerminating(d, Terminating{GraceSeconds: -1}); err == nil {
		t.Fatal("a negative grace was written")
	}
}

func TestReadTerminatingParsing(t *testing.T) {
	for _, tt := range []struct {
		name, content string
		want          int64
		err           string
	}{
		{"node plugin format", `{"graceSeconds": 7, "deletionTimestamp": "2026-12-03T10:00:00Z"}`, 7, ""},
		{"zero grace (force delete)", `{"graceSeconds": 0}`, 0, ""},
		{"unknown fields from a newer node plugin", `{"graceSeconds": 3, "reason": "eviction"}`, 3, ""},
		{"missing grace", `{"deletionTimestamp": "2026-12-03T10:00:00Z"}`, 0, "no graceSeconds"},
		{"negative", `{"graceSeconds": -5}`, 0, "outside"},
		{"absurd", `{"graceSeconds": 99999999999999}`, 0, "outside"},
		{"not JSON", `terminating`, 0, "parse"},
		{"wrong type", `{"graceSeconds": "30"}`, 0, "parse"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, p := dirtest.Pinned(t)
			if err := os.WriteFile(At(p).TerminatingFile(), []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := ReadTerminating(d)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q (got %+v)", err, tt.err, got)
				}
				return
			}
			if err != nil || got.GraceSeconds != tt.want {
				t.Fatalf("got %+v, %v; want graceSeconds %d", got, err, tt.want)
			}
		})
	}
}

// The emptyDir is writable by the pod: a symlink planted at the name must be neither
// followed when reading nor written through.
func TestTerminatingDoesNotFollowSymlinks(t *testing.T) {
	d, p := dirtest.Pinned(t)
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte(`{"graceSeconds": 9}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, At(p).TerminatingFile()); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTerminating(d); err == nil {
		t.Fatal("read the terminating file through a symlink")
	}
	if err := WriteTerminating(d, Terminating{GraceSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != `{"graceSeconds": 9}` {
		t.Fatalf("wrote through the symlink: %q", b)
	}
	if got, err := ReadTerminating(d); err != nil || got.GraceSeconds != 1 {
		t.Fatalf("after replacing the symlink: %+v, %v", got, err)
	}
}

func TestParseTarget(t *testing.T) {
	root := "/var/lib/kubelet"
	tests := []struct {
		target  string
		want    Target
		wantErr bool
	}{
		{target: root + "/pods/123-abc/volumes/kubernetes.io~csi/data/mount", want: Target{"123-abc", "data"}},
		{target: root + "/pods/123/volumes/kubernetes.io~csi/data", wantErr: true},
		{target: root + "/pods/123/volumes/kubernetes.io~empty-dir/data/mount", wantErr: true},
		{target: root + "/pods/123/volumes/kubernetes.io~csi/../mount", wantErr: true},
		{target: root + "/pods/../volumes/kubernetes.io~csi/data/mount", wantErr: true},
		{target: "/tmp/pods/1/volumes/kubernetes.io~csi/data/mount", wantErr: true},
		{target: root + "//pods/1/volumes/kubernetes.io~csi/data/mount", wantErr: true},
		{target: "relative/path", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseTarget(root, tt.target)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v, err=%v", tt.target, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestPaths(t *testing.T) {
	root := "/var/lib/kubelet"
	if got := CSITargetPath(root, "u", "v"); got != root+"/pods/u/volumes/kubernetes.io~csi/v/mount" {
		t.Errorf("CSITargetPath = %s", got)
	}
	if tg, err := ParseTarget(root, CSITargetPath(root, "u", "v")); err != nil || tg != (Target{"u", "v"}) {
		t.Errorf("ParseTarget(CSITargetPath) = %+v, %v", tg, err)
	}
	if got := TmpDirPath(root, "u"); got != root+"/pods/u/volumes/kubernetes.io~empty-dir/gcsfuse-tmp" {
		t.Errorf("TmpDirPath = %s", got)
	}
}

// FuzzParseTarget checks that an accepted target path always lies under the kubelet root
// and yields single, safe path elements.
func FuzzParseTarget(f *testing.F) {
	f.Add("/var/lib/kubelet/pods/uid/volumes/kubernetes.io~csi/data/mount")
	f.Add("/var/lib/kubelet/pods/../volumes/kubernetes.io~csi/data/mount")
	f.Add("/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/a/b/mount")
	f.Fuzz(func(t *testing.T, p string) {
		tg, err := ParseTarget("/var/lib/kubelet", p)
		if err != nil {
			return
		}
		if !strings.HasPrefix(p, "/var/lib/kubelet/pods/") || !podpath.ValidElement(tg.PodUID) || !podpath.ValidElement(tg.VolumeName) {
			t.Fatalf("accepted %q as %+v", p, tg)
		}
		if filepath.Join("/var/lib/kubelet/pods", tg.PodUID, "volumes/kubernetes.io~csi", tg.VolumeName, "mount") != p {
			t.Fatalf("accepted %q does not round-trip: %+v", p, tg)
		}
	})
}
