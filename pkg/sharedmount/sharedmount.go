// Package sharedmount decides the life of the node's shared mounts (volumes with mountMode
// shared): one FUSE mount per sharing key, served by one gcsfuse in the node's mounter and
// bind-mounted into the target of every pod that uses the key. It counts the targets of
// each key and stops the key's mount a linger after the last one is gone, so a Job that
// runs pods one after another mounts once; a key whose gcsfuse died is replaced for the
// pods that come next while the pods that held it keep their (failing) mount.
//
// The effects (mount, offer, bind, unmount) are the caller's, through Ops: this package
// holds only the table and the timers, so every rule is unit-tested without a kernel.
package sharedmount

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// DefaultLinger is how long a key's mount outlives its last target unless configured: long
// enough for the next pod of a Job that runs its pods in sequence (the kubelet's
// unpublish of one and publish of the next are a few seconds apart), short enough that an
// idle gcsfuse does not hold memory for long.
const DefaultLinger = 60 * time.Second

// Key is what two volumes must share to be served by one gcsfuse. Identity must name who
// reads the bucket down to the Kubernetes service account (or the Secret's namespace and
// key), so that a pod never reads with another pod's identity.
type Key struct {
	Bucket string `json:"bucket"`
	// Flags are gcsfuse's flags, in their fixed order (only-dir, the options, the owner).
	Flags       []string `json:"flags"`
	ReadOnly    bool     `json:"readOnly"`
	NoExec      bool     `json:"noExec"`
	NoAtime     bool     `json:"noAtime"`
	ReadAheadKB *int     `json:"readAheadKB,omitempty"`
	Endpoint    string   `json:"endpoint"`
	Identity    string   `json:"identity"`
}

// namePrefix starts every key's name: the name is a hand-off volume name (a DNS label) and
// the mount point's directory.
const namePrefix = "shared-"

// Name is the key's stable name: a digest of every field, so equal keys get one name and a
// restarted node plugin finds its mounts again without a record.
func (k Key) Name() string {
	b, err := json.Marshal(k)
	if err != nil { // a struct of strings, bools and an int: cannot fail
		panic(fmt.Sprintf("sharedmount: encode key: %v", err))
	}
	sum := sha256.Sum256(b)
	return namePrefix + hex.EncodeToString(sum[:12])
}

// IsName reports whether name has the shape of a key's name.
func IsName(name string) bool {
	if len(name) != len(namePrefix)+24 || name[:len(namePrefix)] != namePrefix {
		return false
	}
	_, err := hex.DecodeString(name[len(namePrefix):])
	return err == nil
}

// User is one target bound to a key's mount, and whom to tell about it.
type User struct {
	Target string
	// Pod and Volume name the pod's volume, for Events ("" when recovered after a restart).
	PodNamespace, PodName, PodUID, Volume string
}

// Ops are the effects the table asks for. Each is called with the table's lock held, so
// calls for one node never interleave. Publish's start function is the third: it mounts
// the key's FUSE mount (over a dead one of the same name, if any) and offers it to the
// mounter.
type Ops interface {
	// Alive reports whether the key's mount still has its server: false once its gcsfuse
	// died (the kernel answers ENOTCONN). Asked before a new target binds a running mount.
	Alive(name string) bool
	// Bind bind-mounts the key's mount on target.
	Bind(name, target string) error
	// Stop unmounts the key's mount, which ends its gcsfuse, and removes its files.
	Stop(name string) error
}

// Table is the node's shared mounts.
type Table struct {
	linger time.Duration
	ops    Ops
	log    *slog.Logger

	mu      sync.Mutex
	live    map[string]*entry // by name: the mount new targets bind
	targets map[string]*entry // by target: the mount it binds, live or dead
	closed  bool
}

type entry struct {
	name  string
	users map[string]User
	timer *time.Timer
	dead  bool
	// restored: found at start-up, so a death before it would have gone unreported.
	restored bool
}

// New returns an empty table. linger must not be negative (0: stop at the last target).
func New(ops Ops, linger time.Duration, log *slog.Logger) (*Table, error) {
	if ops == nil {
		return nil, errors.New("sharedmount: no Ops")
	}
	if linger < 0 {
		return nil, fmt.Errorf("sharedmount: linger %s is negative", linger)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Table{linger: linger, ops: ops, log: log, live: map[string]*entry{}, targets: map[string]*entry{}}, nil
}

// Publish binds u.Target to the key's mount, starting the mount first (start) when the key
// has none, or only a dead one. started says whether this call started it.
func (t *Table) Publish(name string, u User, start func() error) (started bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false, errors.New("the node plugin is stopping")
	}
	if old := t.targets[u.Target]; old != nil {
		return false, fmt.Errorf("target %s is already bound to %s", u.Target, old.name)
	}
	e := t.live[name]
	if e != nil && !e.dead && !t.ops.Alive(name) {
		// Its death may not be reported yet (the mounter's report races this publish), or
		// was never seen (a mount found at start-up).
		t.log.Warn("a shared mount has lost its gcsfuse; starting a new one", "key", name, "heldBy", len(e.users), "foundAtStart", e.restored)
		e.dead = true
	}
	if e == nil || e.dead {
		if err := start(); err != nil {
			return false, err
		}
		e = &entry{name: name, users: map[string]User{}}
		t.live[name] = e
		started = true
	}
	if err := t.ops.Bind(name, u.Target); err != nil {
		if len(e.users) == 0 {
			t.lingerLocked(e)
		}
		return started, err
	}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.users[u.Target] = u
	t.targets[u.Target] = e
	return started, nil
}

// Unbound records that target no longer binds its key's mount (the caller unmounted it).
// It returns the key's name ("" when the target was not a shared one) and how many targets
// still use the key; at zero the key's mount stops after the linger.
func (t *Table) Unbound(target string) (name string, remaining int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.targets[target]
	if e == nil {
		return "", 0
	}
	delete(t.targets, target)
	delete(e.users, target)
	if len(e.users) == 0 {
		t.lingerLocked(e)
	}
	return e.name, len(e.users)
}

// NameOf returns the name of the key whose mount target binds ("" when none).
func (t *Table) NameOf(target string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.targets[target]; e != nil {
		return e.name
	}
	return ""
}

// lingerLocked schedules the stop of an unused key: at once for a dead one (nothing serves
// it), after the linger for a live one.
func (t *Table) lingerLocked(e *entry) {
	if e.timer != nil {
		e.timer.Stop()
	}
	d := t.linger
	if e.dead {
		d = 0
	}
	e.timer = time.AfterFunc(d, func() { t.expire(e) })
}

// expire stops e if nothing bound it again meanwhile.
func (t *Table) expire(e *entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(e.users) > 0 || t.closed {
		return
	}
	e.timer = nil
	if t.live[e.name] != e {
		return // replaced after it died: its mount point belongs to the new one
	}
	delete(t.live, e.name)
	if err := t.ops.Stop(e.name); err != nil {
		t.log.Warn("cannot stop an unused shared mount", "key", e.name, "err", err)
		return
	}
	t.log.Info("shared mount stopped: no pod used it for the linger", "key", e.name, "linger", t.linger.String(), "dead", e.dead)
}

// Died marks the key's live mount dead (its gcsfuse exited while mounted) and returns the
// targets that held it, to be told. The next Publish of the key starts a new mount; the
// dead one's targets keep failing until their pods end.
func (t *Table) Died(name string) []User {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.live[name]
	if e == nil || e.dead {
		return nil
	}
	e.dead = true
	if len(e.users) == 0 {
		t.lingerLocked(e)
	}
	return sortedUsers(e)
}

// Users returns the targets of the key's live mount, sorted by target.
func (t *Table) Users(name string) []User {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.live[name]
	if e == nil {
		return nil
	}
	return sortedUsers(e)
}

// Snapshot returns the targets of every live key's mount, by key name.
func (t *Table) Snapshot() map[string][]User {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string][]User, len(t.live))
	for name, e := range t.live {
		if !e.dead {
			out[name] = sortedUsers(e)
		}
	}
	return out
}

// Restore records a key's mount found at start-up, with the targets that bind it: the
// previous node plugin made them and they kept serving. A key found with no target
// lingers again.
func (t *Table) Restore(name string, users []User) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &entry{name: name, users: map[string]User{}, restored: true}
	for _, u := range users {
		e.users[u.Target] = u
		t.targets[u.Target] = e
	}
	t.live[name] = e
	if len(e.users) == 0 {
		t.lingerLocked(e)
	}
}

// Close stops every timer; the mounts are left as they are (they serve their pods across a
// node plugin restart).
func (t *Table) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, e := range t.live {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
}

func sortedUsers(e *entry) []User {
	out := make([]User, 0, len(e.users))
	for _, u := range e.users {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}
