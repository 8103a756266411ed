package firstseen

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/dirwatch"
)

// wait bounds each Wait for a name these tests make appear.
const wait = 5 * time.Second

// A name created under its own name is seen as created, with its owner; other names in the
// directory are ignored, and a later Wait returns the same first appearance.
func TestCreated(t *testing.T) {
	dir := t.TempDir()
	w, err := Start(dir, "a.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, n := range []string{"other", "a.sock"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a, err := w.Wait(wait)
	if err != nil {
		t.Fatal(err)
	}
	if a.MovedIn || a.StatErr != nil || int(a.UID) != os.Geteuid() || a.Seen.IsZero() {
		t.Fatalf("appearance %+v, want created, owned by %d", a, os.Geteuid())
	}
	if again, err := w.Wait(wait); err != nil || again != a {
		t.Fatalf("second Wait = %+v, %v; want %+v again", again, err, a)
	}
}

// A name renamed into the directory is seen as moved in, with the owner it had then: as
// root, a file chowned before the rename.
func TestMovedInWithItsOwner(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, ".pending")
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 65534, 65534
		if err := os.Chown(tmp, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	w, err := Start(dir, "exit")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := os.Rename(tmp, filepath.Join(dir, "exit")); err != nil {
		t.Fatal(err)
	}
	a, err := w.Wait(wait)
	if err != nil {
		t.Fatal(err)
	}
	if !a.MovedIn || a.StatErr != nil || int(a.UID) != uid || int(a.GID) != gid {
		t.Fatalf("appearance %+v, want moved in, owned by %d:%d", a, uid, gid)
	}
}

// A name that never appears is an error after the wait, not a zero Appearance.
func TestWaitTimesOut(t *testing.T) {
	w, err := Start(t.TempDir(), "never")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Wait(10 * time.Millisecond); err == nil {
		t.Fatal("Wait for a name that never appeared succeeded")
	}
}

// An overflow before the name's event makes the first appearance unknown: Wait says so
// rather than report a later event as the first. Driven through the handler, as a real
// overflow needs the kernel's whole queue filled.
func TestOverflowMakesTheFirstAppearanceUnknown(t *testing.T) {
	dir := t.TempDir()
	w, err := Start(dir, "a.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.event(dirwatch.Event{Overflow: true})
	w.event(dirwatch.Event{Dir: dir, Name: "a.sock"})
	if _, err := w.Wait(wait); !errors.Is(err, errOverflow) {
		t.Fatalf("Wait after an overflow = %v, want %v", err, errOverflow)
	}
}

// A missing directory fails Start, and Close may be called twice.
func TestStartFailsOnMissingDir(t *testing.T) {
	if w, err := Start(filepath.Join(t.TempDir(), "missing"), "x"); err == nil {
		w.Close()
		t.Fatal("Start on a missing directory succeeded")
	}
	w, err := Start(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	w.Close()
}
