package dirwatch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestReportsCreateAndRename(t *testing.T) {
	dir := t.TempDir()
	w := watching(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "a.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "x")
	_ = os.WriteFile(tmp, nil, 0o644)
	_ = os.Rename(filepath.Join(dir, "a.sock"), filepath.Join(dir, "exit"))
	want := []Event{{Dir: dir, Name: "a.sock"}, {Dir: dir, Name: "exit", MovedIn: true}}
	for _, we := range want {
		select {
		case ev := <-w.C:
			if ev != we {
				t.Fatalf("event = %+v, want %+v", ev, we)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event for %s", we.Name)
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

// overflowTestMaxQueue skips the real-overflow test where the kernel queue is so large
// that filling it would make the test slow.
const overflowTestMaxQueue = 1 << 17

// eventWait bounds each wait for an event in these tests.
const eventWait = 5 * time.Second

// consume is a consumer as the sidecar is: it records the names created in dir, and on an
// Overflow lists dir again and records what it finds. It stops once it has want names or
// after an Overflow's rescan, and reports whether an Overflow came.
func consume(t *testing.T, w *Watcher, dir string, want int) (map[string]bool, bool) {
	t.Helper()
	seen := map[string]bool{}
	overflowed := false
	for len(seen) < want {
		select {
		case ev, ok := <-w.C:
			if !ok {
				t.Fatal("C closed")
			}
			if !ev.Overflow {
				seen[ev.Name] = true
				continue
			}
			overflowed = true
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				seen[e.Name()] = true
			}
		case <-time.After(eventWait):
			t.Fatalf("consumer saw %d of %d names, then no event for %s (overflowed: %v)", len(seen), want, eventWait, overflowed)
		}
	}
	return seen, overflowed
}

// Far more names created than the kernel queues, while the consumer does not read: the
// kernel drops events and queues IN_Q_OVERFLOW. The consumer must get an Overflow event,
// and with its rescan see every name. Deterministic: the reader is blocked on a full C
// the whole time the files are created, so the kernel queue must overflow.
func TestOverflowThenRescanSeesEverything(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip("cannot read the inotify queue size:", err)
	}
	queue, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || queue > overflowTestMaxQueue {
		t.Skipf("inotify queue size %q: too large to fill in a unit test", b)
	}
	dir := t.TempDir()
	w := watching(t, dir)
	// More than C, one read(2) and the kernel queue can hold together.
	files := queue + eventBuffer + readBatch + 100
	for i := 0; i < files; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%06d", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	seen, overflowed := consume(t, w, dir, files)
	if !overflowed {
		t.Fatal("no Overflow event although the kernel queue overflowed")
	}
	if len(seen) != files {
		t.Fatalf("consumer saw %d names, want %d", len(seen), files)
	}
}

// The kernel's IN_Q_OVERFLOW record (wd -1, no name) becomes an Overflow event, and the
// events around it are still delivered.
func TestDeliverOverflowRecord(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	record := func(wd int32, mask uint32, name string) []byte {
		n := 0
		if name != "" {
			n = (len(name) + 1 + 15) / 16 * 16 // NUL-padded, as the kernel does
		}
		b := make([]byte, unix.SizeofInotifyEvent+n)
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		ev.Wd, ev.Mask, ev.Len = wd, mask, uint32(n)
		copy(b[unix.SizeofInotifyEvent:], name)
		return b
	}
	var buf []byte
	buf = append(buf, record(1, unix.IN_CREATE, "a.sock")...)
	buf = append(buf, record(-1, unix.IN_Q_OVERFLOW, "")...)
	buf = append(buf, record(1, unix.IN_CREATE, "exit")...)
	go w.deliver(buf)
	want := []Event{{Name: "a.sock"}, {Overflow: true}, {Name: "exit"}}
	for _, we := range want {
		select {
		case ev := <-w.C:
			if ev.Name != we.Name || ev.Overflow != we.Overflow {
				t.Fatalf("event %+v, want %+v", ev, we)
			}
		case <-time.After(eventWait):
			t.Fatalf("no event, want %+v", we)
		}
	}
}

// When the kernel refuses an inotify instance (the node's sidecars share uid 65534's
// fs.inotify.max_user_instances), the watcher lists its directories instead: names created
// or moved in are still reported, only within PollInterval rather than at once.
func TestPollingFallbackWhenInotifyIsRefused(t *testing.T) {
	failInotifyInit(t, unix.EMFILE)

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "before"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := New()
	if err != nil {
		t.Fatalf("New with inotify refused: %v, want a polling watcher", err)
	}
	defer w.Close()
	if !w.Polling || !errors.Is(w.Fallback, unix.EMFILE) {
		t.Fatalf("Polling %v, Fallback %v; want polling because of EMFILE", w.Polling, w.Fallback)
	}
	if err := w.Add(filepath.Join(dir, "missing")); err == nil {
		t.Error("Add of a missing directory succeeded")
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	expect := func(name string) {
		t.Helper()
		select {
		case ev := <-w.C:
			if ev.Name != name || ev.Dir != dir {
				t.Fatalf("event = %+v, want %s in %s", ev, name, dir)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event for %s", name)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	expect("a.sock") // and not "before", there before the watch
	other := filepath.Join(t.TempDir(), "exit.tmp")
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other, filepath.Join(dir, "exit")); err != nil {
		t.Fatal(err)
	}
	expect("exit")
	select {
	case ev := <-w.C:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(3 * PollInterval):
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.C; ok {
		t.Fatal("C still open after Close")
	}
}

// Any other failure to make an instance is an error, not a silent fallback.
func TestNewFailsOnOtherInotifyErrors(t *testing.T) {
	failInotifyInit(t, unix.EINVAL)
	if w, err := New(); err == nil {
		w.Close()
		t.Fatal("New succeeded although inotify_init1 failed with EINVAL")
	}
}

// With OnEvent the handler gets each event in the reader goroutine, and nothing goes on C:
// while the handler runs, the reader reads nothing else (a later name waits for it), so
// what the handler looks at is the state at its event. Close waits for a running handler,
// and the handler is never called after Close has returned.
func TestOnEventRunsHandlerInTheReader(t *testing.T) {
	dir := t.TempDir()
	calls := make(chan Event, 8)
	release := make(chan struct{})
	w, err := New(OnEvent(func(ev Event) {
		calls <- ev
		<-release
	}))
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
	call := func() Event {
		t.Helper()
		select {
		case ev := <-calls:
			return ev
		case <-time.After(eventWait):
			t.Fatal("handler not called")
			return Event{}
		}
	}
	if ev := call(); ev != (Event{Dir: dir, Name: "a.sock"}) {
		t.Fatalf("handler got %+v, want a.sock created in %s", ev, dir)
	}
	// The handler is still running: a second name is not handed over until it returns.
	tmp := filepath.Join(t.TempDir(), "exit.tmp")
	if err := os.WriteFile(tmp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "exit")); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-calls:
		t.Fatalf("handler called with %+v while its previous call was running", ev)
	case <-time.After(3 * PollInterval):
	}
	release <- struct{}{}
	if ev := call(); ev != (Event{Dir: dir, Name: "exit", MovedIn: true}) {
		t.Fatalf("handler got %+v, want exit moved into %s", ev, dir)
	}
	// Close while that call runs: Close waits for it.
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the handler was running", err)
	case <-time.After(3 * PollInterval):
	}
	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(eventWait):
		t.Fatal("Close did not return after the handler did")
	}
	if err := os.WriteFile(filepath.Join(dir, "late"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-calls:
		t.Fatalf("handler called with %+v after Close", ev)
	case <-time.After(3 * PollInterval):
	}
	if _, ok := <-w.C; ok {
		t.Fatal("an event went on C although a handler was given")
	}
}

// A polling Watcher hands its events to the OnEvent handler too, from its poller.
func TestOnEventWhenPolling(t *testing.T) {
	failInotifyInit(t, unix.EMFILE)
	dir := t.TempDir()
	calls := make(chan Event, 8)
	w, err := New(OnEvent(func(ev Event) { calls <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Polling {
		t.Fatal("not polling although inotify was refused")
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-calls:
		if ev != (Event{Dir: dir, Name: "a.sock"}) {
			t.Fatalf("handler got %+v, want a.sock in %s", ev, dir)
		}
	case <-time.After(eventWait):
		t.Fatal("handler not called")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-w.C; ok {
		t.Fatal("an event went on C although a handler was given")
	}
}

// An event the kernel queues as soon as the watch exists, before Add has recorded which
// directory the watch is, still names that directory: the reader must not find the watch
// unknown and report an empty Dir, which a consumer matching on Dir would drop.
func TestEventRightAfterTheWatchNamesItsDir(t *testing.T) {
	dir := t.TempDir()
	orig := inotifyAddWatch
	inotifyAddWatch = func(fd int, d string) (int, error) {
		wd, err := orig(fd, d)
		if err == nil {
			// A name created at once, and time for the reader to read it, before Add records wd.
			_ = os.WriteFile(filepath.Join(d, "early"), nil, 0o644)
			time.Sleep(3 * PollInterval)
		}
		return wd, err
	}
	defer func() { inotifyAddWatch = orig }()
	w := watching(t, dir)
	select {
	case ev := <-w.C:
		if ev != (Event{Dir: dir, Name: "early"}) {
			t.Fatalf("event = %+v, want early created in %s", ev, dir)
		}
	case <-time.After(eventWait):
		t.Fatal("no event for early")
	}
}

// failInotifyInit makes New's inotify_init1 fail with errno for the rest of the test: EMFILE
// is the per-user instance limit (the polling fallback), anything else an error.
func failInotifyInit(t *testing.T, errno unix.Errno) {
	t.Helper()
	orig := inotifyInit
	inotifyInit = func() (int, error) { return -1, errno }
	t.Cleanup(func() { inotifyInit = orig })
}

// watching returns a Watcher of dir, closed when the test ends (Close is idempotent).
func watching(t *testing.T, dir string) *Watcher {
	t.Helper()
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	return w
}
