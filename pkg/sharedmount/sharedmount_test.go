package sharedmount

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeOps records the effects asked for.
type fakeOps struct {
	mu       sync.Mutex
	calls    []string
	bindErr  error
	startErr error
	dead     map[string]bool
}

func (f *fakeOps) Alive(name string) bool { return !f.dead[name] }

func (f *fakeOps) add(c string) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }
func (f *fakeOps) start(name string) func() error {
	return func() error {
		f.add("start " + name)
		return f.startErr
	}
}
func (f *fakeOps) Bind(name, target string) error {
	f.add("bind " + name + " " + target)
	return f.bindErr
}
func (f *fakeOps) Stop(name string) error { f.add("stop " + name); return nil }
func (f *fakeOps) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if len(c) >= len(prefix) && c[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestKeyNames(t *testing.T) {
	a := Key{Bucket: "b", Flags: []string{"--implicit-dirs"}, Identity: "ksa ns/a"}
	b := a
	b.Identity = "ksa ns/b"
	c := a
	c.Flags = []string{"--implicit-dirs"}
	if a.Name() == b.Name() {
		t.Fatal("two identities share a name")
	}
	if a.Name() != c.Name() {
		t.Fatal("equal keys got different names")
	}
	ro := a
	ro.ReadOnly = true
	if ro.Name() == a.Name() {
		t.Fatal("read-only and read-write share a name")
	}
	if !IsName(a.Name()) || IsName("shared-xyz") || IsName("vol-1") {
		t.Fatalf("IsName wrong for %q", a.Name())
	}
}

// Many targets of one key start one mount; the mount stops a linger after the last target,
// not before, and a target bound during the linger keeps it.
func TestOneMountPerKeyAndLinger(t *testing.T) {
	ops := &fakeOps{}
	tb, err := New(ops, 150*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	for i := range 50 {
		started, err := tb.Publish("k", User{Target: fmt.Sprint("/t/", i)}, ops.start("k"))
		if err != nil || started != (i == 0) {
			t.Fatalf("publish %d: started %v err %v", i, started, err)
		}
	}
	if n := ops.count("start"); n != 1 {
		t.Fatalf("%d starts for 50 targets of one key, want 1", n)
	}
	for i := range 50 {
		if _, rem := tb.Unbound(fmt.Sprint("/t/", i)); rem != 49-i {
			t.Fatalf("remaining %d after %d unbinds", rem, i+1)
		}
	}
	// Bound again within the linger: no stop, no new start.
	time.Sleep(50 * time.Millisecond)
	if _, err := tb.Publish("k", User{Target: "/t/next"}, ops.start("k")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	if ops.count("stop") != 0 || ops.count("start") != 1 {
		t.Fatalf("calls %v: a target bound within the linger must keep the mount", ops.calls)
	}
	tb.Unbound("/t/next")
	waitFor(t, "stop after the linger", func() bool { return ops.count("stop") == 1 })
	if _, err := tb.Publish("k", User{Target: "/t/later"}, ops.start("k")); err != nil {
		t.Fatal(err)
	}
	if n := ops.count("start"); n != 2 {
		t.Fatalf("%d starts, want a new one after the stop", n)
	}
}

func TestKeysAreSeparate(t *testing.T) {
	ops := &fakeOps{}
	tb, _ := New(ops, time.Hour, nil)
	defer tb.Close()
	tb.Publish("a", User{Target: "/t/1"}, ops.start("a"))
	tb.Publish("b", User{Target: "/t/2"}, ops.start("b"))
	if ops.count("start") != 2 {
		t.Fatalf("calls %v", ops.calls)
	}
	if _, err := tb.Publish("b", User{Target: "/t/1"}, ops.start("b")); err == nil {
		t.Fatal("a target bound twice")
	}
}

// A dead mount is told to its users, replaced for the next target, and its users' unbinds
// never stop the new one.
func TestDiedIsReplaced(t *testing.T) {
	ops := &fakeOps{}
	tb, _ := New(ops, 50*time.Millisecond, nil)
	defer tb.Close()
	tb.Publish("k", User{Target: "/t/1", PodName: "p1"}, ops.start("k"))
	tb.Publish("k", User{Target: "/t/2", PodName: "p2"}, ops.start("k"))
	users := tb.Died("k")
	if len(users) != 2 || users[0].PodName != "p1" {
		t.Fatalf("died users %v", users)
	}
	if again := tb.Died("k"); again != nil {
		t.Fatalf("a second report told %v again", again)
	}
	started, err := tb.Publish("k", User{Target: "/t/3"}, ops.start("k"))
	if err != nil || !started {
		t.Fatalf("publish after death: started %v err %v", started, err)
	}
	tb.Unbound("/t/1")
	tb.Unbound("/t/2")
	time.Sleep(150 * time.Millisecond)
	if ops.count("stop") != 0 {
		t.Fatalf("the dead mount's last unbind stopped the new one: %v", ops.calls)
	}
	if got := tb.Users("k"); len(got) != 1 || got[0].Target != "/t/3" {
		t.Fatalf("users %v", got)
	}
}

func TestFailuresLeaveNothingBound(t *testing.T) {
	ops := &fakeOps{startErr: errors.New("no fuse")}
	tb, _ := New(ops, 20*time.Millisecond, nil)
	defer tb.Close()
	if _, err := tb.Publish("k", User{Target: "/t/1"}, ops.start("k")); err == nil || (tb.NameOf("/t/1") != "") {
		t.Fatal("a failed start bound the target")
	}
	ops.startErr, ops.bindErr = nil, errors.New("bind refused")
	if _, err := tb.Publish("k", User{Target: "/t/1"}, ops.start("k")); err == nil || (tb.NameOf("/t/1") != "") {
		t.Fatal("a failed bind bound the target")
	}
	// The mount started for nobody is stopped after the linger.
	waitFor(t, "stop of a mount no target uses", func() bool { return ops.count("stop") == 1 })
}

func TestRestore(t *testing.T) {
	ops := &fakeOps{}
	tb, _ := New(ops, 30*time.Millisecond, nil)
	defer tb.Close()
	tb.Restore("used", []User{{Target: "/t/1"}})
	tb.Restore("unused", nil)
	if !(tb.NameOf("/t/1") != "") {
		t.Fatal("restored target not known")
	}
	waitFor(t, "stop of the unused restored key", func() bool { return ops.count("stop unused") == 1 })
	if _, err := tb.Publish("used", User{Target: "/t/2"}, ops.start("used")); err != nil || ops.count("start") != 0 {
		t.Fatalf("restored key started again: %v %v", err, ops.calls)
	}
	if !slices.Contains(ops.calls, "bind used /t/2") {
		t.Fatalf("calls %v", ops.calls)
	}
	// A restored mount whose gcsfuse died meanwhile is replaced, not bound.
	ops.dead = map[string]bool{"gone": true}
	tb.Restore("gone", []User{{Target: "/t/9"}})
	if started, err := tb.Publish("gone", User{Target: "/t/10"}, ops.start("gone")); err != nil || !started {
		t.Fatalf("publish on a restored dead mount: started %v err %v", started, err)
	}
}

func TestSnapshotShowsLiveKeys(t *testing.T) {
	ops := &fakeOps{}
	tb, _ := New(ops, time.Hour, nil)
	defer tb.Close()
	tb.Publish("a", User{Target: "/t/1", PodName: "p1"}, ops.start("a"))
	tb.Publish("a", User{Target: "/t/2", PodName: "p2"}, ops.start("a"))
	tb.Publish("b", User{Target: "/t/3", PodName: "p3"}, ops.start("b"))
	tb.Died("b")
	snap := tb.Snapshot()
	if len(snap) != 1 || len(snap["a"]) != 2 || snap["a"][1].PodName != "p2" {
		t.Fatalf("snapshot %v: want key a with its two pods, dead b left out", snap)
	}
}
