// Package sharedmount decides the life of the node's shared mounts (volumes with mountMode
// shared): one FUSE mount per sharing key at a time, served by one gcsfuse in the node's
// mounter and bind-mounted into the target of every pod that uses the key. It counts the
// targets of each mount and stops it a linger after the last one is gone, so a Job that
// runs its pods one after another mounts once; a mount whose gcsfuse died is replaced for
// the pods that come next while the pods that held it keep their (failing) mount.
//
// Each mount of a key is a generation with a name of its own (MountName: the key's name and
// the generation), and everything the caller makes for it (the mount point, the hand-off
// volume and its socket, the credential files, the mounter's temp and cache directories,
// its status reports) is named after that: a mount that replaces a dead or lingering one
// never shares a path, a socket name or a file with it, and a late report about an old
// generation never touches the new one.
//
// Each key has a lock of its own, held across the effects for that key (start, bind, stop,
// the credential writes the caller does under it): a key's effects never interleave, and one
// key's slow start or stop never holds up another's. The table's own lock guards its maps
// only and is never held across an effect.
//
// The effects (mount, offer, bind, unmount) are the caller's, through Ops and Publish's use
// function: this package holds only the table and the timers, so every rule is unit-tested
// without a kernel.
package sharedmount

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultLinger is how long a key's mount outlives its last target unless configured: long
// enough for the next pod of a Job that runs its pods in sequence (the kubelet's
// unpublish of one and publish of the next are a few seconds apart), short enough that an
// idle gcsfuse does not hold memory for long.
const DefaultLinger = 60 * time.Second

// A mount whose Stop failed (an unmount refused, a file that could not be removed) is
// stopped again, stopRetryDelay after the first failure, then doubling up to
// stopRetryDelayMax, for as long as the node plugin runs: it stays in the table (never
// bound again) until a stop succeeds, and from the stopRetriesQuiet-th failure on each one
// is logged as an error.
const (
	stopRetryDelay    = 5 * time.Second
	stopRetryDelayMax = 5 * time.Minute
	stopRetriesQuiet  = 5
)

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

// MountName names generation gen of key's mount: "<key>-<gen>". Generation 0 is the key's
// name alone, the name the release before generations gave a key's only mount, so that a
// node plugin upgraded under serving mounts finds them (Restore).
func MountName(key string, gen uint64) string {
	if gen == 0 {
		return key
	}
	return key + "-" + strconv.FormatUint(gen, 10)
}

// ParseMount returns the key and the generation of a mount's name; ok is false for any
// other name.
func ParseMount(name string) (key string, gen uint64, ok bool) {
	if IsName(name) {
		return name, 0, true
	}
	i := strings.LastIndexByte(name, '-')
	if i < 0 || !IsName(name[:i]) || i+1 == len(name) || name[i+1] == '0' {
		return "", 0, false
	}
	gen, err := strconv.ParseUint(name[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return name[:i], gen, true
}

// User is one target bound to a key's mount, and whom to tell about it.
type User struct {
	Target string
	// Pod and Volume name the pod's volume, for Events ("" when recovered after a restart).
	PodNamespace, PodName, PodUID, Volume string
}

// Ops are the effects the table asks for, by mount name, each under the lock of the mount's
// key.
type Ops interface {
	// Alive reports whether the mount still has its server: false once its gcsfuse died, or
	// when it does not answer within a bound (a mount that cannot answer a statfs cannot
	// serve a new pod either). Asked before a new target binds a running mount.
	Alive(mount string) bool
	// Bind bind-mounts the mount on target.
	Bind(mount, target string) error
	// Stop unmounts the mount, which ends its gcsfuse, and removes its files. An error
	// leaves the mount to be stopped again later.
	Stop(mount string) error
}

// Table is the node's shared mounts.
type Table struct {
	linger time.Duration
	ops    Ops
	log    *slog.Logger
	// retryDelay is stopRetryDelay (shorter in tests).
	retryDelay time.Duration

	// mu guards the maps and every field of keyState and mount below marked so; it is never
	// held across an effect.
	mu      sync.Mutex
	keys    map[string]*keyState
	mounts  map[string]*mount // by name: every mount not stopped yet
	targets map[string]*mount // by target: the mount it binds, live or dead
	closed  bool
	// gen is the last generation given: one counter for the node, started at the time in
	// milliseconds and raised above every generation found at start-up, so that a name is
	// never given twice, not even across a node plugin's restart (the mounter, which
	// outlives it, may still hold a stopped mount's volume under its name for a moment).
	gen uint64
}

// keyState is one key's mounts, and the lock of its effects.
type keyState struct {
	name string
	// effects is held across every effect for the key (Ops, Publish's use).
	effects sync.Mutex

	// Guarded by Table.mu:
	refs   int               // calls holding or waiting for effects: the state is dropped at 0 with no mounts
	cur    *mount            // the mount new targets bind; nil when none, or it died
	mounts map[string]*mount // every generation not stopped yet, by mount name
}

// mount is one generation of a key's mount. Guarded by Table.mu.
type mount struct {
	key   *keyState
	name  string
	users map[string]User
	dead  bool
	timer *time.Timer
	// armed counts the timers set: a timer that fires after another replaced it (or after a
	// bind cancelled it) finds the count moved on and does nothing.
	armed    uint64
	stopping bool
	failures int // stops that failed
	// reported: its users were told of its death (Died); a death seen first by Alive is
	// still told when the mounter's report comes.
	reported bool
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
	return &Table{linger: linger, ops: ops, log: log, retryDelay: stopRetryDelay, keys: map[string]*keyState{}, mounts: map[string]*mount{},
		targets: map[string]*mount{}, gen: uint64(time.Now().UnixMilli())}, nil
}

// ErrStopping is the answer to a call after Close.
var ErrStopping = errors.New("the node plugin is stopping")

// keyLocked returns key's state with a reference taken (t.mu held), creating it.
func (t *Table) keyLocked(key string) *keyState {
	ks := t.keys[key]
	if ks == nil {
		ks = &keyState{name: key, mounts: map[string]*mount{}}
		t.keys[key] = ks
	}
	ks.refs++
	return ks
}

// release ends a call that held ks's effects lock and a reference to it.
func (t *Table) release(ks *keyState) {
	ks.effects.Unlock()
	t.mu.Lock()
	ks.refs--
	t.dropIfUnusedLocked(ks)
	t.mu.Unlock()
}

func (t *Table) dropIfUnusedLocked(ks *keyState) {
	if ks.refs == 0 && len(ks.mounts) == 0 && t.keys[ks.name] == ks {
		delete(t.keys, ks.name)
	}
}

// Publish binds u.Target to key's mount. use runs under the key's lock with the mount's
// name before the bind: start true when there is no mount to bind (none, or only a dead
// one), and use must then start one under that name (mount it, offer it, write what its
// gcsfuse reads); start false when it joins the running one (use writes what this target
// brings, e.g. a fresher token). A use that fails leaves the table as it was: cleaning up
// what a failed start made is use's. started says whether this call started the mount.
func (t *Table) Publish(key string, u User, use func(mount string, start bool) error) (name string, started bool, err error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return "", false, ErrStopping
	}
	if old := t.targets[u.Target]; old != nil {
		t.mu.Unlock()
		return "", false, fmt.Errorf("target %s is already bound to %s", u.Target, old.name)
	}
	ks := t.keyLocked(key)
	t.mu.Unlock()
	ks.effects.Lock()
	defer t.release(ks)

	t.mu.Lock()
	m, closed := ks.cur, t.closed
	t.mu.Unlock()
	if closed {
		return "", false, ErrStopping
	}
	if m != nil && !t.ops.Alive(m.name) {
		// Its death may not be reported yet (the mounter's report races this publish), or
		// was never seen (a mount found at start-up).
		t.mu.Lock()
		t.log.Warn("a shared mount has lost its gcsfuse; starting a new one", "mount", m.name, "heldBy", len(m.users), "foundAtStart", m.restored)
		t.markDeadLocked(m)
		t.mu.Unlock()
		m = nil
	}
	if m == nil {
		// Known before it starts: a report of its gcsfuse's end that comes while it starts
		// (Died) finds it, and its first target is told after the bind.
		t.mu.Lock()
		t.gen++
		name = MountName(key, t.gen)
		m = &mount{key: ks, name: name, users: map[string]User{}}
		ks.mounts[name] = m
		t.mounts[name] = m
		t.mu.Unlock()
		if err := use(name, true); err != nil {
			t.mu.Lock()
			t.cancelLocked(m)
			delete(ks.mounts, name)
			delete(t.mounts, name)
			t.mu.Unlock()
			return name, false, err
		}
		t.mu.Lock()
		if !m.dead {
			ks.cur = m
		}
		t.mu.Unlock()
		started = true
	} else if err := use(m.name, false); err != nil {
		return m.name, false, err
	}
	if err := t.ops.Bind(m.name, u.Target); err != nil {
		t.mu.Lock()
		if len(m.users) == 0 {
			t.lingerLocked(m)
		}
		t.mu.Unlock()
		return m.name, started, err
	}
	t.mu.Lock()
	m.users[u.Target] = u
	t.targets[u.Target] = m
	t.cancelLocked(m)
	t.mu.Unlock()
	return m.name, started, nil
}

// WithTarget runs f under the lock of the key whose mount target binds, with the mount's
// name (a republish's fresh token goes to that mount's files, never beside its stop). bound
// is false, and f not run, when target binds no shared mount.
func (t *Table) WithTarget(target string, f func(mount string) error) (bound bool, err error) {
	m := t.lockTarget(target)
	if m == nil {
		return false, nil
	}
	defer t.release(m.key)
	return true, f(m.name)
}

// lockTarget takes the lock of the key whose mount target binds and returns that mount,
// the caller to release its key; nil (and no lock held) when target binds none, or was
// unbound while this call waited for the lock.
func (t *Table) lockTarget(target string) *mount {
	t.mu.Lock()
	m := t.targets[target]
	if m == nil {
		t.mu.Unlock()
		return nil
	}
	ks := m.key
	ks.refs++
	t.mu.Unlock()
	ks.effects.Lock()
	t.mu.Lock()
	still := t.targets[target] == m
	t.mu.Unlock()
	if !still {
		t.release(ks)
		return nil
	}
	return m
}

// Unbound records that target no longer binds its mount (the caller unmounted it). then,
// when not nil, runs under the key's lock with the mount's name and how many targets still
// bind it (e.g. to hand the mount another pod's token). It returns the mount's name (""
// when the target was not a shared one) and that count; at zero the mount stops after the
// linger.
func (t *Table) Unbound(target string, then func(mount string, remaining int)) (name string, remaining int) {
	m := t.lockTarget(target)
	if m == nil {
		return "", 0
	}
	defer t.release(m.key)
	t.mu.Lock()
	delete(t.targets, target)
	delete(m.users, target)
	remaining = len(m.users)
	if remaining == 0 {
		t.lingerLocked(m)
	}
	t.mu.Unlock()
	if then != nil {
		then(m.name, remaining)
	}
	return m.name, remaining
}

// NameOf returns the name of the mount target binds ("" when none).
func (t *Table) NameOf(target string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.targets[target]; m != nil {
		return m.name
	}
	return ""
}

// cancelLocked stops m's timer: a target binds it again.
func (t *Table) cancelLocked(m *mount) {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	m.armed++
}

// lingerLocked schedules the stop of an unused mount: at once for a dead one (nothing
// serves it), after the linger for a live one.
func (t *Table) lingerLocked(m *mount) {
	d := t.linger
	if m.dead {
		d = 0
	}
	t.armLocked(m, d)
}

func (t *Table) armLocked(m *mount, d time.Duration) {
	t.cancelLocked(m)
	if t.closed {
		return
	}
	armed := m.armed
	m.timer = time.AfterFunc(d, func() { t.expire(m, armed) })
}

// expire stops m if nothing bound it again meanwhile and no later timer replaced this one.
func (t *Table) expire(m *mount, armed uint64) {
	t.mu.Lock()
	if t.closed || m.armed != armed {
		t.mu.Unlock()
		return
	}
	ks := m.key
	ks.refs++
	t.mu.Unlock()
	ks.effects.Lock()
	defer t.release(ks)
	t.mu.Lock()
	if t.closed || m.armed != armed || len(m.users) > 0 || m.stopping || t.mounts[m.name] != m {
		t.mu.Unlock()
		return
	}
	m.timer = nil
	m.stopping = true
	if ks.cur == m {
		ks.cur = nil // no new target binds a mount being stopped
	}
	t.mu.Unlock()
	err := t.ops.Stop(m.name)
	t.mu.Lock()
	defer t.mu.Unlock()
	m.stopping = false
	if err != nil {
		m.failures++
		d := t.retryDelay << min(m.failures-1, 16)
		d = min(d, max(t.retryDelay, stopRetryDelayMax))
		log := t.log.Warn
		if m.failures >= stopRetriesQuiet {
			log = t.log.Error
		}
		log("cannot stop an unused shared mount; trying again", "mount", m.name, "err", err, "attempt", m.failures, "retryIn", d.String())
		t.armLocked(m, d)
		return
	}
	t.log.Info("shared mount stopped: no pod used it for the linger", "mount", m.name, "linger", t.linger.String(), "dead", m.dead, "attempts", m.failures+1)
	delete(ks.mounts, m.name)
	delete(t.mounts, m.name)
	if ks.cur == m {
		ks.cur = nil
	}
}

// markDeadLocked marks m dead: no new target binds it, and it stops once its last target
// is gone.
func (t *Table) markDeadLocked(m *mount) {
	m.dead = true
	if m.key.cur == m {
		m.key.cur = nil
	}
	if len(m.users) == 0 && !m.stopping {
		t.lingerLocked(m)
	}
}

// Died marks the mount dead (its gcsfuse exited while mounted) and returns the targets
// that held it, to be told. Only that generation: a late report about a mount that was
// replaced leaves its replacement alone. The next Publish of the key starts a new mount; the
// dead one's targets keep failing until their pods end.
func (t *Table) Died(mountName string) []User {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mounts[mountName]
	if m == nil || m.reported {
		return nil
	}
	m.reported = true
	if !m.dead {
		t.markDeadLocked(m)
	}
	return sortedUsers(m)
}

// KeyOf returns the name of the key whose mount target binds ("" when none).
func (t *Table) KeyOf(target string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.targets[target]; m != nil {
		return m.key.name
	}
	return ""
}

// Dead reports whether the mount's gcsfuse was reported or found gone.
func (t *Table) Dead(mountName string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mounts[mountName]
	return m != nil && m.dead
}

// Users returns the targets that bind the mount, sorted by target.
func (t *Table) Users(mountName string) []User {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m := t.mounts[mountName]; m != nil {
		return sortedUsers(m)
	}
	return nil
}

// Snapshot returns the targets of every live mount, by mount name.
func (t *Table) Snapshot() map[string][]User {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string][]User{}
	for name, m := range t.mounts {
		if !m.dead && !m.stopping && m.failures == 0 {
			out[name] = sortedUsers(m)
		}
	}
	return out
}

// Restore records a mount found at start-up, with the targets that bind it: the previous
// node plugin made them and they kept serving. Of a key's mounts, the newest generation is
// the one new targets bind (if it is alive when they come); one found with no target
// lingers again. A name that is not a mount's is ignored.
func (t *Table) Restore(mountName string, users []User) {
	key, gen, ok := ParseMount(mountName)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	ks := t.keys[key]
	if ks == nil {
		ks = &keyState{name: key, mounts: map[string]*mount{}}
		t.keys[key] = ks
	}
	m := &mount{key: ks, name: mountName, users: map[string]User{}, restored: true}
	for _, u := range users {
		m.users[u.Target] = u
		t.targets[u.Target] = m
	}
	ks.mounts[mountName] = m
	t.mounts[mountName] = m
	if cur := ks.cur; cur == nil || gen > generation(cur.name) {
		ks.cur = m
	}
	t.gen = max(t.gen, gen)
	if len(m.users) == 0 {
		t.lingerLocked(m)
	}
}

// Close stops every timer; the mounts are left as they are (they serve their pods across a
// node plugin restart).
func (t *Table) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, m := range t.mounts {
		t.cancelLocked(m)
	}
}

// generation is a mount name's generation (0 for a name that is not a mount's).
func generation(mountName string) uint64 {
	_, gen, _ := ParseMount(mountName)
	return gen
}

func sortedUsers(m *mount) []User {
	out := make([]User, 0, len(m.users))
	for _, u := range m.users {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Target < out[j].Target })
	return out
}
