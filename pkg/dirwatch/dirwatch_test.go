package dirwatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReportsCreateAndRename(t *testing.T) {
	dir := t.TempDir()
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "x")
	_ = os.WriteFile(tmp, nil, 0o644)
	_ = os.Rename(filepath.Join(dir, "a.sock"), filepath.Join(dir, "exit"))
	want := []string{"a.sock", "exit"}
	for _, name := range want {
		select {
		case ev := <-w.C:
			if ev.Name != name || ev.Dir != dir {
				t.Fatalf("event = %+v, want %s in %s", ev, name, dir)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event for %s", name)
		}
	}
}

func TestCloseEndsChannel(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for range w.C {
		}
		close(done)
	}()
	w.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("C not closed after Close")
	}
}

func TestAddMissingDirFails(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("watching a missing dir succeeded")
	}
}
