package sidecarmounter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
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

// fullRecordJSON is an offer record with every field set, as this release writes it and an
// upgraded node plugin must read it: a renamed key would lose that field of every offer
// pending across the upgrade.
const fullRecordJSON = `{"target":"/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/data/mount","volumeID":"vol-1","podUID":"uid-1",` +
	`"pod":{"Namespace":"ns","Name":"p","UID":"uid-1"},"volume":{"version":2,"volumeName":"data","bucket":"bkt","readOnly":true,` +
	`"flags":["--implicit-dirs","--uid=1001"],"endpoint":"http://gcs:4443","keyFile":true,"identity":"ksa ns/reader",` +
	`"httpsProxy":"http://proxy:3128","httpProxy":"http://proxy:3128","noProxy":"metadata","caBundle":true},` +
	`"noExec":true,"noAtime":true,"readAheadKB":4096}`

// fullRecordName is that record's file name: the hash of its target, which Recover checks.
const fullRecordName = "33c6c4ec2860bc9ac5891242.json"

func fullRecord() *offerRecord {
	kb := 4096
	return &offerRecord{Target: "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/data/mount", VolumeID: "vol-1", PodUID: "uid-1",
		Pod: nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"},
		Volume: handoff.Volume{Version: handoff.VersionNetwork, VolumeName: "data", Bucket: "bkt", ReadOnly: true, Flags: []string{"--implicit-dirs", "--uid=1001"},
			Endpoint: "http://gcs:4443", KeyFile: true, Identity: "ksa ns/reader", HTTPSProxy: "http://proxy:3128", HTTPProxy: "http://proxy:3128",
			NoProxy: "metadata", CABundle: true},
		NoExec: true, NoAtime: true, ReadAheadKB: &kb}
}

// An offer record is written byte for byte as the previous releases wrote it, under the
// same name, readable by root alone (it names the pod's identity), in a directory of root
// alone; and each release's records read back whole (the first release's had no
// readAheadKB: the kernel's default).
func TestOfferRecordFormat(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "offers")
	s := newTestMounter(t, Config{StateDir: stateDir})
	rec := fullRecord()
	if err := s.saveRecord(rec); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(stateDir, fullRecordName)
	if s.recordPath(rec.Target) != p {
		t.Fatalf("record path %s, want %s", s.recordPath(rec.Target), p)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != fullRecordJSON {
		t.Fatalf("record written:\n%s\nwant:\n%s\n(%v)", b, fullRecordJSON, err)
	}
	for path, mode := range map[string]os.FileMode{stateDir: 0o700, p: 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want mode %v", path, st.Mode(), err, mode)
		}
	}
	for _, tc := range []struct {
		json string
		want *offerRecord
	}{
		{fullRecordJSON, rec},
		{`{"target":"/t","volumeID":"v","podUID":"u","pod":{"Namespace":"ns","Name":"p","UID":"u"},"volume":{"version":1,"volumeName":"data","bucket":"bkt"},"noExec":true}`,
			&offerRecord{Target: "/t", VolumeID: "v", PodUID: "u", Pod: nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "u"},
				Volume: handoff.Volume{Version: 1, VolumeName: "data", Bucket: "bkt"}, NoExec: true}},
	} {
		var got offerRecord
		if err := json.Unmarshal([]byte(tc.json), &got); err != nil || !reflect.DeepEqual(&got, tc.want) {
			t.Errorf("record read back = %+v, %v; want %+v", got, err, tc.want)
		}
	}
}

// Without a state directory nothing is recorded, dropped or recovered.
func TestNoRecordsWithoutAStateDirectory(t *testing.T) {
	s := newTestMounter(t, Config{})
	if err := s.saveRecord(fullRecord()); err != nil {
		t.Fatal(err)
	}
	s.dropRecord(fullRecord().Target)
	if n, err := s.Recover(context.Background()); n != 0 || err != nil {
		t.Fatalf("Recover without a state directory = %d, %v", n, err)
	}
}

// A state directory that cannot be made or read fails the save and the recovery, naming
// what failed; one not made yet has nothing to recover.
func TestUnusableStateDirectory(t *testing.T) {
	s := newTestMounter(t, Config{StateDir: filepath.Join(t.TempDir(), "absent")})
	if n, err := s.Recover(context.Background()); n != 0 || err != nil {
		t.Fatalf("Recover of a state directory not made yet = %d, %v", n, err)
	}
	file := filepath.Join(t.TempDir(), "offers")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s = newTestMounter(t, Config{StateDir: file})
	if err := s.saveRecord(fullRecord()); err == nil || !strings.Contains(err.Error(), "offer record directory") {
		t.Errorf("saveRecord into a file: %v", err)
	}
	if n, err := s.Recover(context.Background()); n != 0 || err == nil || !strings.Contains(err.Error(), "read offer records") {
		t.Errorf("Recover of a file = %d, %v", n, err)
	}
}

// Dropping a target's record removes that record only; a target without one is no error,
// and a record that cannot be removed is logged with its target.
func TestDropRecordOfItsTargetOnly(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "offers")
	logs := &syncbuf.Buffer{}
	s := newTestMounter(t, Config{StateDir: stateDir, Log: slog.New(slog.NewTextHandler(logs, nil))})
	a, b := fullRecord(), fullRecord()
	b.Target += "-b"
	for _, r := range []*offerRecord{a, b} {
		if err := s.saveRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	s.dropRecord(a.Target)
	s.dropRecord(a.Target)
	if _, err := os.Stat(s.recordPath(a.Target)); !os.IsNotExist(err) {
		t.Errorf("dropped record: %v", err)
	}
	if _, err := os.Stat(s.recordPath(b.Target)); err != nil {
		t.Errorf("another target's record: %v", err)
	}
	if logs.String() != "" {
		t.Errorf("logged dropping records: %s", logs)
	}
	stuck := "/var/lib/kubelet/pods/uid-2/volumes/kubernetes.io~csi/data/mount"
	if err := os.MkdirAll(filepath.Join(s.recordPath(stuck), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	s.dropRecord(stuck)
	if l := logs.String(); !strings.Contains(l, "cannot remove offer record") || !strings.Contains(l, stuck) {
		t.Errorf("a record that cannot be removed: log %q", l)
	}
}

// Recover reports and removes every record it cannot trust (not JSON, a volume that fails
// validation, a file name that is not its target's), leaves files that are no record alone,
// and drops without error the record of a target unpublished meanwhile (no longer mounted),
// having held that target's lock; none of them is offered or remembered as published.
func TestRecoverDropsUnusableAndUnpublishedRecords(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "offers")
	spy := &beginSpy{Store: nodevolume.NewStore()}
	s := newTestMounter(t, Config{StateDir: stateDir, Store: spy})
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name string, v any) string {
		b, ok := v.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		p := filepath.Join(stateDir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unpublished := &offerRecord{Target: filepath.Join(t.TempDir(), "mount"), VolumeID: "vol-1", PodUID: "uid-1",
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}}
	invalid := &offerRecord{Target: "/t/invalid", Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data"}} // no bucket
	unpublishedPath := write(filepath.Base(s.recordPath(unpublished.Target)), unpublished)
	bad := map[string]string{
		"not JSON": write(filepath.Base(s.recordPath("/t/garbled")), []byte("{not json")),
		"invalid":  write(filepath.Base(s.recordPath(invalid.Target)), invalid),
		"misnamed": write(filepath.Base(s.recordPath("/t/elsewhere")), unpublished),
	}
	other := write("README", []byte("not a record"))
	tmp := write(".pending.json.tmp", []byte("{"))

	n, err := s.Recover(context.Background())
	if n != 0 || err == nil {
		t.Fatalf("Recover = %d, %v; want 0 and the unusable records reported", n, err)
	}
	for what, p := range bad {
		if !strings.Contains(err.Error(), "offer record "+filepath.Base(p)+" unusable") {
			t.Errorf("the %s record is not reported: %v", what, err)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the %s record is left: %v", what, err)
		}
	}
	if strings.Contains(err.Error(), filepath.Base(unpublishedPath)) || strings.Contains(err.Error(), "README") {
		t.Errorf("the unpublished target's record or a file that is no record reported: %v", err)
	}
	if _, err := os.Stat(unpublishedPath); !os.IsNotExist(err) {
		t.Errorf("the record of a target unpublished meanwhile is left: %v", err)
	}
	for _, p := range []string{other, tmp} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a file that is no record: %v", err)
		}
	}
	if len(spy.begun) != 1 || spy.begun[0] != unpublished.Target {
		t.Errorf("targets worked on: %q, want the unpublished target's alone", spy.begun)
	}
	if spy.Published() != 0 || spy.TakeOffer(unpublished.Target) != nil {
		t.Errorf("a dropped record's target is published (%d) or offered", spy.Published())
	}
	if end, err := spy.Begin(unpublished.Target); err != nil {
		t.Errorf("the target's lock is still held after Recover: %v", err)
	} else {
		end()
	}
}

// A record whose target has a call in flight is left for the next start, and the refusal
// reported.
func TestRecoverLeavesTheRecordOfABusyTarget(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "offers")
	s := newTestMounter(t, Config{StateDir: stateDir})
	rec := &offerRecord{Target: filepath.Join(t.TempDir(), "mount"), VolumeID: "vol-1", PodUID: "uid-1",
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}}
	if err := s.saveRecord(rec); err != nil {
		t.Fatal(err)
	}
	end, err := s.cfg.Store.Begin(rec.Target)
	if err != nil {
		t.Fatal(err)
	}
	defer end()
	if n, err := s.Recover(context.Background()); n != 0 || status.Code(err) != codes.Aborted {
		t.Fatalf("Recover of a busy target's record = %d, %v; want 0, Aborted", n, err)
	}
	if _, err := os.Stat(s.recordPath(rec.Target)); err != nil {
		t.Fatalf("the busy target's record: %v", err)
	}
}

// A record whose target holds a mount that is not this driver's (not fuse.gcsfuse: the
// target was unpublished and its path reused) is dropped, and that mount left alone, dead
// as it is.
func TestRecoverDropsTheRecordOfATargetMountedByAnother(t *testing.T) {
	needs.RootAndFUSE(t)
	stateDir := filepath.Join(t.TempDir(), "offers")
	s := newTestMounter(t, Config{StateDir: stateDir})
	target := filepath.Join(t.TempDir(), "mount")
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Mount("other", target, "fuse", 0, fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fuse.Fd()))
	fuse.Close() // its server is gone: the mount is dead
	if err != nil {
		t.Fatalf("mount another FUSE file system: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	rec := &offerRecord{Target: target, VolumeID: "vol-1", PodUID: "uid-1",
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}}
	if err := s.saveRecord(rec); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Recover(context.Background()); n != 0 || err != nil {
		t.Fatalf("Recover = %d, %v; want 0, nil", n, err)
	}
	if _, err := os.Stat(s.recordPath(target)); !os.IsNotExist(err) {
		t.Errorf("the record: %v", err)
	}
	if info, err := fusemount.Lookup(target); err != nil || info == nil || info.FSType != "fuse" || info.Source != "other" {
		t.Errorf("the other mount: %+v, %v", info, err)
	}
}

// deadMount mounts target as this driver does and closes the connection, as a node plugin
// that died before the sidecar took it leaves the mount: dead (ENOTCONN).
func deadMount(t *testing.T, target string) {
	t.Helper()
	if err := os.MkdirAll(target, 0o750); err != nil {
		t.Fatal(err)
	}
	fuse, err := fusemount.Mount(target, fusemount.Options{Source: "bkt", UserID: os.Getuid(), GroupID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	fuse.Close()
	t.Cleanup(func() {
		for range 4 { // the dead mount, and the one offered again
			_ = unix.Unmount(target, unix.MNT_DETACH)
		}
	})
}

// The record of an offer that died with the previous node plugin is offered again: a new
// mount of the same bucket and options stacked on the dead one, its socket in the pod's
// hand-off directory, the target remembered as published with the recorded volume, and the
// record kept until the sidecar takes the offer.
func TestRecoverOffersADeadMountAgain(t *testing.T) {
	needs.RootAndFUSE(t)
	stateDir := filepath.Join(t.TempDir(), "offers")
	m, tmp, target := podMounter(t, Config{StateDir: stateDir, UID: os.Getuid(), GID: os.Getgid()})
	tp := target("data")
	deadMount(t, tp)
	rec := &offerRecord{Target: tp, VolumeID: "vol-1", PodUID: "uid-1", Pod: nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"},
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt", ReadOnly: true, Flags: []string{"--implicit-dirs"}}}
	if err := m.saveRecord(rec); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(m.recordPath(tp))
	if err != nil {
		t.Fatal(err)
	}
	n, err := m.Recover(context.Background())
	if n != 1 || err != nil {
		t.Fatalf("Recover = %d, %v; want 1, nil", n, err)
	}
	p, ok := m.cfg.Store.Publication(tp)
	if !ok || p.VolumeID != "vol-1" || !reflect.DeepEqual(p.Volume, rec.Volume) {
		t.Errorf("publication = %+v %v, want vol-1 with %+v", p, ok, rec.Volume)
	}
	if info, err := fusemount.Lookup(tp); err != nil || info == nil || info.FSType != fusemount.FSType || info.Source != "bkt" || !info.ReadOnly {
		t.Errorf("the target's mount: %+v, %v; want a read-only %s of bkt", info, err, fusemount.FSType)
	}
	if n, err := fusemount.Depth(tp); err != nil || n != 2 {
		t.Errorf("mounts at the target: %d, %v; want the new one on the dead one", n, err)
	}
	if _, err := os.Stat(filepath.Join(podfiles.At(tmp).HandoffDir(), podfiles.HandoffSocketName("data"))); err != nil {
		t.Errorf("the offer's socket: %v", err)
	}
	if b, err := os.ReadFile(m.recordPath(tp)); err != nil || string(b) != string(saved) {
		t.Errorf("the record while the offer waits: %s, %v; want %s", b, err, saved)
	}
	// Its unpublish stops the offer and removes the mount, the target and the record.
	if err := m.Unpublish(context.Background(), tp, m.cfg.Log); err != nil {
		t.Fatal(err)
	}
	if m.cfg.Store.TakeOffer(tp) != nil {
		t.Error("the offer is still kept")
	}
	for _, p := range []string{tp, m.recordPath(tp)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after the unpublish: %v", p, err)
		}
	}
}

// A dead mount whose pod has lost its emptyDir cannot be offered again: the record is dropped
// and the failure reported naming the target; nothing is remembered as published. The dead
// mount stays for the kubelet's unpublish, which removes it: never a bare directory a new
// container could bind.
func TestRecoverOfADeadMountThatCannotBeOfferedAgain(t *testing.T) {
	needs.RootAndFUSE(t)
	stateDir := filepath.Join(t.TempDir(), "offers")
	m := newTestMounter(t, Config{StateDir: stateDir})
	tp := filepath.Join(t.TempDir(), "mount")
	deadMount(t, tp)
	rec := &offerRecord{Target: tp, VolumeID: "vol-1", PodUID: "uid-gone",
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}}
	if err := m.saveRecord(rec); err != nil {
		t.Fatal(err)
	}
	n, err := m.Recover(context.Background())
	if n != 0 || err == nil || !strings.Contains(err.Error(), "offer "+tp+" again") {
		t.Fatalf("Recover = %d, %v; want 0 and the failure naming the target", n, err)
	}
	if n, err := fusemount.Depth(tp); err != nil || n != 1 {
		t.Errorf("mounts at the target: %d, %v; want the dead one alone", n, err)
	}
	defer func() {
		if err := m.Unpublish(context.Background(), tp, m.cfg.Log); err != nil {
			t.Errorf("the unpublish of the dead mount: %v", err)
		}
		if info, err := fusemount.Lookup(tp); err != nil || info != nil {
			t.Errorf("the dead mount after the unpublish: %+v, %v", info, err)
		}
	}()
	if _, err := os.Stat(m.recordPath(tp)); !os.IsNotExist(err) {
		t.Errorf("the record: %v", err)
	}
	if m.cfg.Store.Published() != 0 {
		t.Error("a volume not offered again is remembered as published")
	}
}

func TestMain(m *testing.M) {
	fusemount.RunProbeIfAsked() // Recover's fusemount.Dead re-executes this test binary as its probe
	os.Exit(m.Run())
}

// A target the previous node plugin answered with I/O errors (its sidecar died and will not
// come back) is answered so again after a restart, on top of its dead mount, until the
// unpublish removes every layer.
func TestRecoverAnswersAnIOErrorTargetAgain(t *testing.T) {
	needs.RootAndFUSE(t)
	stateDir := filepath.Join(t.TempDir(), "offers")
	m, _, target := podMounter(t, Config{StateDir: stateDir, UID: os.Getuid(), GID: os.Getgid()})
	tp := target("data")
	deadMount(t, tp)
	rec := &offerRecord{Target: tp, VolumeID: "vol-1", PodUID: "uid-1", Pod: nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"},
		Volume: handoff.Volume{Version: handoff.Version, VolumeName: "data", Bucket: "bkt"}, EIO: true}
	if err := m.saveRecord(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.recordPathFor(tp, true)); err != nil {
		t.Fatalf("the I/O-error record: %v (a release that reads only .json records must not see it)", err)
	}
	if n, err := m.Recover(context.Background()); n != 1 || err != nil {
		t.Fatalf("Recover = %d, %v; want 1, nil", n, err)
	}
	if _, ok := m.cfg.Store.Publication(tp); !ok {
		t.Error("the target is not remembered as published")
	}
	if _, err := os.Stat(tp); err != nil {
		t.Errorf("stat of the target: %v, want it to work", err)
	}
	if _, err := os.ReadDir(tp); !errors.Is(err, syscall.EIO) {
		t.Errorf("listing the target: %v, want EIO", err)
	}
	if err := m.Unpublish(context.Background(), tp, m.cfg.Log); err != nil {
		t.Fatal(err)
	}
	if n, err := fusemount.Depth(tp); err != nil || n != 0 {
		t.Errorf("mounts after the unpublish: %d, %v", n, err)
	}
	if _, err := os.Stat(m.recordPathFor(tp, true)); !os.IsNotExist(err) {
		t.Errorf("the record after the unpublish: %v", err)
	}
}
