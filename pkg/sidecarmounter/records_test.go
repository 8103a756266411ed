package sidecarmounter

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
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
