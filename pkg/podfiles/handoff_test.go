package podfiles

import (
	"errors"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
	"os"
	"testing"
)

func TestHandoffSocketVolume(t *testing.T) {
	for _, tt := range []struct {
		name, volume string
		notSocket    bool
		invalid      bool
	}{
		{name: "data.sock", volume: "data"},
		{name: HandoffSocketName("vol-1"), volume: "vol-1"},
		{name: "data", notSocket: true},
		{name: "data.sock.tmp", notSocket: true},
		{name: PendingHandoffSocketName("data"), notSocket: true},
		{name: ".data.sock", notSocket: true},
		{name: ".sock", notSocket: true},
		{name: "Data.sock", invalid: true},
		{name: "-a.sock", invalid: true},
		{name: "a..sock", invalid: true},
	} {
		got, err := HandoffSocketVolume(tt.name)
		switch {
		case tt.notSocket:
			if !errors.Is(err, ErrNotHandoffSocket) {
				t.Errorf("HandoffSocketVolume(%q) = %q, %v; want ErrNotHandoffSocket", tt.name, got, err)
			}
		case tt.invalid:
			if err == nil || errors.Is(err, ErrNotHandoffSocket) {
				t.Errorf("HandoffSocketVolume(%q) = %q, %v; want an invalid volume name", tt.name, got, err)
			}
		case err != nil || got != tt.volume:
			t.Errorf("HandoffSocketVolume(%q) = %q, %v; want %q", tt.name, got, err, tt.volume)
		}
		if err == nil && HandoffSocketName(got) != tt.name {
			t.Errorf("HandoffSocketName(%q) = %q, want %q", got, HandoffSocketName(got), tt.name)
		}
	}
}

// The node plugin creates the hand-off directory on the pinned emptyDir (never through a
// planted symlink); the sidecar opens it by path and checks for a volume's socket.
func TestHandoffDir(t *testing.T) {
	tmp, p := dirtest.Pinned(t)
	if _, err := OpenHandoffDir(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenHandoffDir before any offer: %v, want ErrNotExist", err)
	}
	hd, err := CreateHandoffDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	hd.Close()
	if st, err := os.Lstat(At(p).HandoffDir()); err != nil || !st.IsDir() || st.Mode().Perm() != 0o755 {
		t.Fatalf("hand-off dir: %v, %v; want a 0755 directory", st, err)
	}
	if err := os.WriteFile(At(p).HandoffSocket("data"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	hd, err = OpenHandoffDir(p)
	if err != nil {
		t.Fatal(err)
	}
	defer hd.Close()
	if ok, err := HandoffSocketPresent(hd, "data"); err != nil || !ok {
		t.Fatalf("HandoffSocketPresent(data) = %v, %v", ok, err)
	}
	if ok, err := HandoffSocketPresent(hd, "other"); err != nil || ok {
		t.Fatalf("HandoffSocketPresent(other) = %v, %v", ok, err)
	}

	planted, q := dirtest.Pinned(t)
	if err := os.Symlink(t.TempDir(), At(q).HandoffDir()); err != nil {
		t.Fatal(err)
	}
	if d, err := CreateHandoffDir(planted); err == nil {
		d.Close()
		t.Fatal("CreateHandoffDir followed a symlink")
	}
	if d, err := OpenHandoffDir(q); err == nil {
		d.Close()
		t.Fatal("OpenHandoffDir followed a symlink")
	}
}
