package sharedmount

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/waitfor"
)

// fakeOps records the effects asked for, and checks the rules a kernel would make hurt: no
// bind of a mount that was never started or was stopped, no stop of a mount still bound.
type fakeOps struct {
	mu         sync.Mutex
	calls      []string
	bindErr    error
	startErr   error
	stopErrs   int // the next stops that fail
	dead       map[string]bool
	started    map[string]bool
	stopped    map[string]bool
	bound      map[string]int // mount -> targets bound (the test's unbinds decrement)
	violations []string
	startGate  chan struct{} // when set, a start waits for it
}

func newFakeOps() *fakeOps {
	return &fakeOps{dead: map[string]bool{}, started: map[string]bool{}, stopped: map[string]bool{}, bound: map[string]int{}}
}

func (f *fakeOps) Alive(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.dead[name]
}

func (f *fakeOps) add(c string) { f.mu.Lock(); f.calls = append(f.calls, c); f.mu.Unlock() }

// use is Publish's use function: a start mounts the mount under its name.
func (f *fakeOps) use(mount string, start bool) error {
	if !start {
		f.add("join " + mount)
		return nil
	}
	if f.startGate != nil {
		<-f.startGate
	}
	f.add("start " + mount)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return f.startErr
	}
	if f.started[mount] {
		f.violations = append(f.violations, "started twice: "+mount)
	}
	f.started[mount] = true
	return nil
}

func (f *fakeOps) Bind(name, target string) error {
	f.add("bind " + name + " " + target)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bindErr != nil {
		return f.bindErr
	}
	if !f.started[name] || f.stopped[name] {
		f.violations = append(f.violations, fmt.Sprintf("bind %s on %s: started %v, stopped %v", target, name, f.started[name], f.stopped[name]))
	}
	f.bound[name]++
	return nil
}

// unbound is Unbound's then: the caller's unmount, under the key's lock.
func (f *fakeOps) unbound(name string, _ int) { f.unbind(name) }

func (f *fakeOps) unbind(name string) {
	f.mu.Lock()
	f.bound[name]--
	f.mu.Unlock()
}

func (f *fakeOps) Stop(name string) error {
	f.add("stop " + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopErrs > 0 {
		f.stopErrs--
		return errors.New("unmount: device busy")
	}
	if f.bound[name] > 0 {
		f.violations = append(f.violations, fmt.Sprintf("stop %s with %d targets bound", name, f.bound[name]))
	}
	f.stopped[name] = true
	return nil
}

func (f *fakeOps) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func (f *fakeOps) checkRules(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.violations) > 0 {
		t.Fatalf("%d violations, first: %v", len(f.violations), f.violations[:min(5, len(f.violations))])
	}
}

// Keys' names, as Key.Name gives them.
var (
	kk = Key{Bucket: "k"}.Name()
	ka = Key{Bucket: "a"}.Name()
	kb = Key{Bucket: "b"}.Name()
)

// newTable is a table of fake effects with linger, closed at the test's end.
func newTable(t *testing.T, linger time.Duration) (*fakeOps, *Table) {
	t.Helper()
	ops := newFakeOps()
	tb, err := New(ops, linger, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tb.Close)
	return ops, tb
}

// waitKeysForgotten waits until the table holds no key: every mount stopped and no call
// holding a key's lock.
func waitKeysForgotten(t *testing.T, tb *Table) {
	t.Helper()
	waitfor.Until(t, 5*time.Second, "every key forgotten", func() bool {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		return len(tb.keys) == 0
	})
}

func publish(t *testing.T, tb *Table, ops *fakeOps, key, target string) (string, bool) {
	t.Helper()
	name, started, err := tb.Publish(key, User{Target: target}, ops.use)
	if err != nil {
		t.Fatalf("publish %s of %s: %v", target, key, err)
	}
	return name, started
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
	ra := a
	ra.ReadAheadKB = new(int)
	if ra.Name() == a.Name() {
		t.Fatal("a read-ahead left out of the key")
	}
	if !IsName(a.Name()) || IsName("shared-xyz") || IsName("vol-1") {
		t.Fatalf("IsName wrong for %q", a.Name())
	}
}

// A mount's name carries its key and generation, and nothing else parses as one; the
// previous release's names (the key alone) are generation 0.
func TestMountNames(t *testing.T) {
	key := Key{Bucket: "b"}.Name()
	for _, gen := range []uint64{0, 1, 2, 17, 1 << 40} {
		k, g, ok := ParseMount(MountName(key, gen))
		if !ok || k != key || g != gen {
			t.Errorf("ParseMount(MountName(%d)) = %q %d %v", gen, k, g, ok)
		}
	}
	if MountName(key, 1) == MountName(key, 2) || MountName(key, 0) != key {
		t.Fatal("generations share a name")
	}
	for _, bad := range []string{"", "shared-", key + "-", key + "-0", key + "-01", key + "-x", key + "--1", key + "-+1", "vol-1", key[:len(key)-1] + "-1"} {
		if _, _, ok := ParseMount(bad); ok {
			t.Errorf("ParseMount(%q) ok", bad)
		}
	}
	if n := len(MountName(key, ^uint64(0))); n > 63 {
		t.Fatalf("a mount's name of %d characters: not a DNS label", n)
	}
}

// Many targets of one key start one mount; the mount stops a linger after the last target,
// not before, and a target bound during the linger keeps it. The next start is a new
// generation.
func TestOneMountPerKeyAndLinger(t *testing.T) {
	ops := newFakeOps()
	tb, err := New(ops, 150*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	var first string
	for i := range 50 {
		name, started := publish(t, tb, ops, kk, fmt.Sprint("/t/", i))
		if started != (i == 0) {
			t.Fatalf("publish %d: started %v", i, started)
		}
		if i == 0 {
			first = name
		} else if name != first {
			t.Fatalf("publish %d bound %s, want %s", i, name, first)
		}
	}
	if n := ops.count("start"); n != 1 {
		t.Fatalf("%d starts for 50 targets of one key, want 1", n)
	}
	for i := range 50 {
		if _, rem := tb.Unbound(fmt.Sprint("/t/", i), ops.unbound); rem != 49-i {
			t.Fatalf("remaining %d after %d unbinds", rem, i+1)
		}
	}
	// Bound again within the linger: no stop, no new start.
	time.Sleep(50 * time.Millisecond)
	publish(t, tb, ops, kk, "/t/next")
	time.Sleep(250 * time.Millisecond)
	if ops.count("stop") != 0 || ops.count("start") != 1 {
		t.Fatalf("calls %v: a target bound within the linger must keep the mount", ops.calls)
	}
	tb.Unbound("/t/next", ops.unbound)
	waitfor.Until(t, 5*time.Second, "stop after the linger", func() bool { return ops.count("stop") == 1 })
	second, started := publish(t, tb, ops, kk, "/t/later")
	if !started || second == first {
		t.Fatalf("after the stop: started %v, mount %s (first %s): want a new generation", started, second, first)
	}
	ops.checkRules(t)
}

func TestKeysAreSeparate(t *testing.T) {
	ops, tb := newTable(t, time.Hour)
	a, _ := publish(t, tb, ops, ka, "/t/1")
	b, _ := publish(t, tb, ops, kb, "/t/2")
	if ops.count("start") != 2 || a == b {
		t.Fatalf("calls %v", ops.calls)
	}
	if _, _, err := tb.Publish(kb, User{Target: "/t/1"}, ops.use); err == nil {
		t.Fatal("a target bound twice")
	}
}

// A dead mount is told to its users, replaced for the next target by a new generation, and
// neither its users' unbinds nor a late second report about it touch the new one.
func TestDiedIsReplaced(t *testing.T) {
	ops, tb := newTable(t, 50*time.Millisecond)
	old, _, _ := tb.Publish(kk, User{Target: "/t/1", PodName: "p1"}, ops.use)
	tb.Publish(kk, User{Target: "/t/2", PodName: "p2"}, ops.use)
	users := tb.Died(old)
	if len(users) != 2 || users[0].PodName != "p1" {
		t.Fatalf("died users %v", users)
	}
	if again := tb.Died(old); again != nil {
		t.Fatalf("a second report told %v again", again)
	}
	repl, started := publish(t, tb, ops, kk, "/t/3")
	if !started || repl == old {
		t.Fatalf("publish after death: started %v, mount %s (dead %s)", started, repl, old)
	}
	if late := tb.Died(old); late != nil {
		t.Fatalf("a late report about the dead mount told %v", late)
	}
	for _, tg := range []string{"/t/1", "/t/2"} {
		tb.Unbound(tg, ops.unbound)
	}
	waitfor.Until(t, 5*time.Second, "stop of the dead mount", func() bool { return ops.count("stop "+old) == 1 })
	time.Sleep(150 * time.Millisecond)
	if ops.count("stop "+repl) != 0 {
		t.Fatalf("the dead mount's last unbind stopped its replacement: %v", ops.calls)
	}
	if got := tb.Users(repl); len(got) != 1 || got[0].Target != "/t/3" {
		t.Fatalf("users %v", got)
	}
	if snap := tb.Snapshot(); len(snap) != 1 || len(snap[repl]) != 1 {
		t.Fatalf("snapshot %v: want the replacement alone", snap)
	}
	ops.checkRules(t)
}

// A mount that does not answer (Alive false, a timeout included) is not bound: a new
// generation starts, and the silent one keeps its targets.
func TestNotAliveStartsANewGeneration(t *testing.T) {
	ops, tb := newTable(t, time.Hour)
	first, _ := publish(t, tb, ops, kk, "/t/1")
	ops.mu.Lock()
	ops.dead[first] = true
	ops.mu.Unlock()
	second, started := publish(t, tb, ops, kk, "/t/2")
	if !started || second == first {
		t.Fatalf("started %v, mount %s: want a new generation beside %s", started, second, first)
	}
	if tb.NameOf("/t/1") != first || tb.NameOf("/t/2") != second {
		t.Fatalf("targets bind %s and %s", tb.NameOf("/t/1"), tb.NameOf("/t/2"))
	}
	ops.checkRules(t)
}

func TestFailuresLeaveNothingBound(t *testing.T) {
	ops := newFakeOps()
	ops.startErr = errors.New("no fuse")
	tb, _ := New(ops, 20*time.Millisecond, nil)
	defer tb.Close()
	if _, _, err := tb.Publish(kk, User{Target: "/t/1"}, ops.use); err == nil || tb.NameOf("/t/1") != "" {
		t.Fatal("a failed start bound the target")
	}
	if snap := tb.Snapshot(); len(snap) != 0 {
		t.Fatalf("a failed start left %v", snap)
	}
	ops.startErr, ops.bindErr = nil, errors.New("bind refused")
	if _, _, err := tb.Publish(kk, User{Target: "/t/1"}, ops.use); err == nil || tb.NameOf("/t/1") != "" {
		t.Fatal("a failed bind bound the target")
	}
	// The mount started for nobody is stopped after the linger, and the key forgotten.
	waitfor.Until(t, 5*time.Second, "stop of a mount no target uses", func() bool { return ops.count("stop") == 1 })
	waitKeysForgotten(t, tb)
}

// A stop that fails is tried again, and the mount forgotten only once one succeeded: a
// failed unmount never leaves a mount the table no longer knows.
func TestStopRetried(t *testing.T) {
	ops := newFakeOps()
	tb, _ := New(ops, 10*time.Millisecond, nil)
	tb.retryDelay = 10 * time.Millisecond
	defer tb.Close()
	ops.stopErrs = 2
	name, _ := publish(t, tb, ops, kk, "/t/1")
	tb.Unbound("/t/1", ops.unbound)
	waitfor.Until(t, 5*time.Second, "three stops", func() bool { return ops.count("stop "+name) == 3 })
	waitKeysForgotten(t, tb)
	ops.mu.Lock()
	stopped := ops.stopped[name]
	ops.mu.Unlock()
	if !stopped {
		t.Fatal("the mount was forgotten before a stop succeeded")
	}
}

func TestRestore(t *testing.T) {
	ops, tb := newTable(t, 30*time.Millisecond)
	used, unused := Key{Bucket: "used"}.Name(), Key{Bucket: "unused"}.Name()
	// The previous release's name (generation 0) and a generation of this one.
	tb.Restore(MountName(used, 0), []User{{Target: "/t/0"}})
	tb.Restore(MountName(used, 3), []User{{Target: "/t/1"}})
	tb.Restore(MountName(unused, 2), nil)
	tb.Restore("not-a-mount", []User{{Target: "/t/x"}})
	ops.started[MountName(used, 0)], ops.started[MountName(used, 3)], ops.started[MountName(unused, 2)] = true, true, true
	ops.bound[MountName(used, 0)], ops.bound[MountName(used, 3)] = 1, 1
	if tb.NameOf("/t/1") != MountName(used, 3) || tb.NameOf("/t/0") != MountName(used, 0) || tb.NameOf("/t/x") != "" {
		t.Fatal("restored targets not known")
	}
	waitfor.Until(t, 5*time.Second, "stop of the unused restored mount", func() bool { return ops.count("stop "+MountName(unused, 2)) == 1 })
	if name, started := publish(t, tb, ops, used, "/t/2"); started || name != MountName(used, 3) {
		t.Fatalf("publish on a restored key: %s started %v, want the newest generation bound", name, started)
	}
	// A restored mount whose gcsfuse died meanwhile is replaced, not bound, by a generation
	// above every one found.
	ops.dead[MountName(used, 3)] = true
	if name, started := publish(t, tb, ops, used, "/t/3"); !started || generation(name) <= 3 {
		t.Fatalf("publish on a restored dead mount: %s started %v, want a generation above 3", name, started)
	}
	// A generation found above the counter raises it: no name is given twice.
	far := uint64(time.Now().UnixMilli()) + 1e9
	tb.Restore(MountName(unused, far), []User{{Target: "/t/far"}})
	ops.started[MountName(unused, far)], ops.bound[MountName(unused, far)] = true, 1
	ops.dead[MountName(unused, far)] = true
	if name, _ := publish(t, tb, ops, unused, "/t/4"); generation(name) <= far {
		t.Fatalf("started %s after finding generation %d", name, far)
	}
	ops.checkRules(t)
}

// One key's slow start holds up that key's publishes, never another key's, nor the
// table's reads.
func TestKeysLockedApart(t *testing.T) {
	ops := newFakeOps()
	ops.startGate = make(chan struct{})
	tb, _ := New(ops, time.Hour, nil)
	defer tb.Close()
	slow := make(chan error, 1)
	go func() {
		_, _, err := tb.Publish(ka, User{Target: "/t/slow"}, ops.use)
		slow <- err
	}()
	waitfor.Until(t, 5*time.Second, "the slow start to begin", func() bool {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		return tb.keys[ka] != nil
	})
	time.Sleep(20 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		_, _, err := tb.Publish(kb, User{Target: "/t/fast"}, func(mount string, start bool) error { return ops.started2(mount) })
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a key's publish waited for another key's start")
	}
	_ = tb.Snapshot() // the table's reads never wait for a start either
	close(ops.startGate)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// started2 starts a mount without waiting at the gate.
func (f *fakeOps) started2(mount string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started[mount] = true
	return nil
}

// Publishes, unbinds and linger expiries of one key racing, many times over: every target
// binds a started mount that is not stopped, no mount is stopped with a target bound, and
// at the end no key is wedged (a last publish binds, then everything stops).
func TestPublishesRacingTheLinger(t *testing.T) {
	ops, tb := newTable(t, time.Millisecond)
	const workers, rounds = 4, 300
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				target := fmt.Sprintf("/t/%d/%d", w, i)
				name, _, err := tb.Publish(kk, User{Target: target}, ops.use)
				if err != nil {
					errs <- err
					return
				}
				// Around the linger: held for 0 to 1.5 ms, then gone for 0 to 1.5 ms.
				time.Sleep(time.Duration((i*7+w*3)%4) * 500 * time.Microsecond)
				if got, _ := tb.Unbound(target, ops.unbound); got != name {
					errs <- fmt.Errorf("target %s unbound from %q, bound to %q", target, got, name)
					return
				}
				time.Sleep(time.Duration((i*5+w)%4) * 500 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ops.checkRules(t)
	name, _ := publish(t, tb, ops, kk, "/t/last")
	ops.checkRules(t)
	tb.Unbound("/t/last", ops.unbound)
	waitfor.Until(t, 5*time.Second, "every mount stopped", func() bool {
		ops.mu.Lock()
		defer ops.mu.Unlock()
		for m := range ops.started {
			if !ops.stopped[m] {
				return false
			}
		}
		return true
	})
	waitKeysForgotten(t, tb)
	t.Logf("%d publishes over %d generations; last %s", workers*rounds+1, ops.count("start"), name)
	if n := ops.count("start"); n < 10 {
		t.Fatalf("%d generations: the linger never expired between publishes, so nothing raced it", n)
	}
	ops.checkRules(t)
}

// WithTarget and Unbound's then run with the target's mount under its key's lock; a
// target bound to nothing runs nothing.
func TestWithTargetAndThen(t *testing.T) {
	ops, tb := newTable(t, time.Hour)
	name, _ := publish(t, tb, ops, kk, "/t/1")
	publish(t, tb, ops, kk, "/t/2")
	var got []string
	bound, err := tb.WithTarget("/t/1", func(mount string) error { got = append(got, "with "+mount); return nil })
	if !bound || err != nil {
		t.Fatalf("WithTarget: %v %v", bound, err)
	}
	if bound, _ := tb.WithTarget("/t/none", func(string) error { t.Fatal("run for no target"); return nil }); bound {
		t.Fatal("bound for no target")
	}
	tb.Unbound("/t/1", func(mount string, remaining int) { got = append(got, fmt.Sprintf("then %s %d", mount, remaining)) })
	if want := []string{"with " + name, "then " + name + " 1"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// The mounter's report that a new mount's gcsfuse ended can come while the mount starts,
// before its first target is bound: the mount is dead from then on (the next pod gets a
// new one), and its first target is among those Users names, so it is told.
func TestDiedWhileStarting(t *testing.T) {
	ops, tb := newTable(t, time.Hour)
	var told []User
	name, started, err := tb.Publish(kk, User{Target: "/t/1", PodName: "p1"}, func(mount string, fresh bool) error {
		if err := ops.use(mount, fresh); err != nil {
			return err
		}
		told = tb.Died(mount) // the report, before the bind
		return nil
	})
	if err != nil || !started {
		t.Fatalf("publish: %v started %v", err, started)
	}
	if len(told) != 0 {
		t.Fatalf("users told before any was bound: %v", told)
	}
	if !tb.Dead(name) {
		t.Fatal("a mount reported dead while it started is not dead")
	}
	if got := tb.Users(name); len(got) != 1 || got[0].PodName != "p1" {
		t.Fatalf("users %v: want the first target, bound after the report", got)
	}
	next, started := publish(t, tb, ops, kk, "/t/2")
	if !started || next == name {
		t.Fatalf("the next publish bound %s (started %v), want a new mount beside the dead %s", next, started, name)
	}
	// A start that fails leaves nothing to stop.
	ops.startErr = errors.New("no fuse")
	tb2, _ := New(ops, 10*time.Millisecond, nil)
	defer tb2.Close()
	if _, _, err := tb2.Publish(ka, User{Target: "/t/x"}, ops.use); err == nil {
		t.Fatal("a failed start bound")
	}
	time.Sleep(50 * time.Millisecond)
	if n := ops.count("stop"); n != 0 {
		t.Fatalf("%d stops of a mount that never started", n)
	}
}

// A death seen first by Alive (a publish found the mount silent) is still told to the
// mount's pods when the mounter's report comes, once.
func TestDeathSeenByAliveIsStillTold(t *testing.T) {
	ops, tb := newTable(t, time.Hour)
	first, _ := publish(t, tb, ops, kk, "/t/1")
	ops.mu.Lock()
	ops.dead[first] = true
	ops.mu.Unlock()
	publish(t, tb, ops, kk, "/t/2") // Alive false: marked dead, a new mount started
	if users := tb.Died(first); len(users) != 1 || users[0].Target != "/t/1" {
		t.Fatalf("the report after Alive told %v, want the target of the dead mount", users)
	}
	if again := tb.Died(first); again != nil {
		t.Fatalf("told twice: %v", again)
	}
}

// An unbound target is forgotten: the kubelet may publish the same path again (a pod's
// volume mounted again after an unmount), and the table does not grow with every target
// it ever had.
func TestUnboundTargetForgotten(t *testing.T) {
	ops, tb := newTable(t, time.Hour)
	for range 3 {
		publish(t, tb, ops, kk, "/t/again")
		if name, _ := tb.Unbound("/t/again", ops.unbound); name == "" {
			t.Fatal("unbound a target the table did not know")
		}
		if tb.NameOf("/t/again") != "" {
			t.Fatal("an unbound target still binds its mount")
		}
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.targets) != 0 {
		t.Fatalf("%d targets known after every one was unbound", len(tb.targets))
	}
}
