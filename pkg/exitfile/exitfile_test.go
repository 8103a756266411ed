package exitfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
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
	if err := os.Symlink(target, filepath.Join(dir, contract.ExitFile)); err != nil {
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
