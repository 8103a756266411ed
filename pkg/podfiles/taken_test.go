package podfiles

import (
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/dirtest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestTakenRecords(t *testing.T) {
	dir, path := dirtest.Pinned(t)
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := WriteTaken(dir, "a", Taken{Bucket: "bkt-a", TakenAt: at}); err != nil {
		t.Fatal(err)
	}
	if err := WriteTaken(dir, "b", Taken{Bucket: "bkt-b", TakenAt: at}); err != nil {
		t.Fatal(err)
	}
	if err := WriteTaken(dir, "b", Taken{Bucket: "bkt-b2", TakenAt: at}); err != nil { // replaced
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(At(path).VolumeDir("b")), At(path).VolumeDir("b")} {
		if st, err := os.Lstat(p); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, %v; want a 0700 directory", p, st, err)
		}
	}
	if st, err := os.Lstat(At(path).TakenFile("b")); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("taken record: %v, %v; want a 0600 file", st, err)
	}
	if err := RemoveTaken(dir, "a"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTaken(dir, "a"); err != nil {
		t.Fatalf("removing a missing record: %v", err)
	}
	// A pod-planted symlink in place of a volume dir is never followed.
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, filepath.Base(At(path).TakenFile("c"))), []byte(`{"bucket":"evil"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, At(path).VolumeDir("c")); err != nil {
		t.Fatal(err)
	}
	if err := WriteTaken(dir, "c", Taken{Bucket: "x"}); err == nil {
		t.Fatal("wrote a taken record through a symlink")
	}
	// A garbled record still counts; a name that is not a volume's does not.
	if err := os.MkdirAll(At(path).VolumeDir("garbled"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(At(path).TakenFile("garbled"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(At(path).VolumeDir("Not_a_volume"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(At(path).TakenFile("Not_a_volume"), []byte(`{"bucket":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTaken(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["b"].Bucket != "bkt-b2" || !got["b"].TakenAt.Equal(at) || got["garbled"] != (Taken{}) {
		t.Fatalf("records = %+v, want b with bucket bkt-b2 and an empty garbled", got)
	}
}
