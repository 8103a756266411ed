package sidecarmounter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
)

// concurrentSavers is how many goroutines record an offer for one target at once.
const concurrentSavers = 32

// Offer records of one target saved at once (a publish and a recovery, or two retries)
// must not share a temp file: every save succeeds, the record is one saver's complete
// record, and no temp file is left in the state directory.
func TestSaveRecordConcurrentWriters(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	s := newTestMounter(t, Config{StateDir: stateDir})
	const target = "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/data/mount"
	recs := make([]*offerRecord, concurrentSavers)
	for i := range recs {
		recs[i] = &offerRecord{Target: target, VolumeID: fmt.Sprintf("vol-%02d", i), PodUID: "uid-1",
			Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt", Flags: []string{fmt.Sprintf("--uid=%d", i)}}}
	}
	var wg sync.WaitGroup
	errs := make(chan error, concurrentSavers)
	start := make(chan struct{})
	for _, rec := range recs {
		wg.Add(1)
		go func(rec *offerRecord) {
			defer wg.Done()
			<-start
			errs <- s.saveRecord(rec)
		}(rec)
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent saveRecord: %v", err)
		}
	}
	b, err := os.ReadFile(s.recordPath(target))
	if err != nil {
		t.Fatal(err)
	}
	var got offerRecord
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("record is not one complete record: %v", err)
	}
	found := false
	for _, rec := range recs {
		found = found || (rec.VolumeID == got.VolumeID && len(got.Volume.Flags) == 1 && rec.Volume.Flags[0] == got.Volume.Flags[0])
	}
	if !found {
		t.Fatalf("record %+v is no saver's record", got)
	}
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if filepath.Join(stateDir, e.Name()) != s.recordPath(target) {
			t.Errorf("left behind in the state directory: %s", e.Name())
		}
	}
}

// beginSpy is a Store that lists the targets Recover begins to work on.
type beginSpy struct {
	nodevolume.Store
	mu    sync.Mutex
	begun []string
}

func (b *beginSpy) Begin(target string) (func(), error) {
	b.mu.Lock()
	b.begun = append(b.begun, target)
	b.mu.Unlock()
	return b.Store.Begin(target)
}

// An offer record whose file name is not its target's hash (copied, renamed, or another
// target's file overwritten) is not trusted at start-up: Recover reports it unusable and
// removes it, and its target is neither probed nor offered again, at this restart or the
// next.
func TestRecoverRemovesMisnamedRecord(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	spy := &beginSpy{Store: nodevolume.NewStore()}
	s := newTestMounter(t, Config{StateDir: stateDir, Store: spy})
	target := filepath.Join(t.TempDir(), "pods", "uid-1", "volumes", "kubernetes.io~csi", "data", "mount")
	rec := offerRecord{Target: target, VolumeID: "vol-1", PodUID: "uid-1",
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	stray := s.recordPath(target + "-other")
	if err := os.WriteFile(stray, b, 0o600); err != nil {
		t.Fatal(err)
	}

	n, err := s.Recover(context.Background())
	if n != 0 || err == nil || !strings.Contains(err.Error(), "offer record "+filepath.Base(stray)+" unusable") {
		t.Errorf("Recover over a record under another target's name = %d, %v; want 0 and the record reported unusable", n, err)
	}
	if _, err := os.Stat(stray); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the misnamed record is left in the state directory (stat: %v)", err)
	}
	if len(spy.begun) != 0 {
		t.Errorf("Recover worked on the targets %q of a misnamed record", spy.begun)
	}
	if _, ok := spy.Publication(target); ok {
		t.Errorf("the misnamed record's target %s is remembered as published", target)
	}
	// The next restart has nothing left to probe.
	if n, err := s.Recover(context.Background()); n != 0 || err != nil || len(spy.begun) != 0 {
		t.Errorf("second Recover = %d, %v, targets worked on %q; want nothing", n, err, spy.begun)
	}
}
