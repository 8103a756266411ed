package sharedmounter

import (
	"errors"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
)

// A shared mount offered by this process has the mounter's status stream: its gcsfuse's end,
// the mounter's report at its stop, or the stream's end when the mounter dies without a word
// (offerShared). A mount found at start-up (Recover) has none: the stream died with
// the previous node plugin. recoveredWatch looks at those mounts instead, so that a gcsfuse
// or a mounter that ends under them after a node plugin's restart (the upgrade procedure
// rolls the node plugin, then replaces the mounter) still tells their pods.
const (
	// recoveredCheckInterval is how often each recovered mount with pods is checked: a
	// statfs, which gcsfuse answers without Cloud Storage.
	recoveredCheckInterval = 5 * time.Second
	// recoveredCheckWait bounds one check; a mount that does not answer in time is left for
	// the next round (slow is not dead), its check still pending.
	recoveredCheckWait = 2 * time.Second
)

// recoveredWatch checks the mounts found at start-up until each has ended, lost its last
// pod, or the mounter closes. Owned by the Mounter: started by Recover, ended by
// Close (stop).
type recoveredWatch struct {
	m *Mounter
	// interval is recoveredCheckInterval (tests: shorter).
	interval time.Duration
	mu       sync.Mutex
	mounts   map[string]handoff.Volume // by mount: what its pods' Events name
	pending  map[string]bool           // a statfs not returned yet (a hung mount)
	stop     chan struct{}
	done     chan struct{}
}

func (m *Mounter) watchRecovered(mounts map[string]handoff.Volume) {
	if len(mounts) == 0 {
		return
	}
	w := &recoveredWatch{m: m, interval: recoveredCheckInterval, mounts: mounts, pending: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	m.mu.Lock()
	m.recovered = w
	m.mu.Unlock()
	go w.run() // owned by m: ends on Close or when nothing is left to watch
}

func (w *recoveredWatch) close() {
	close(w.stop)
	<-w.done
}

func (w *recoveredWatch) run() {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if w.round() == 0 {
			return
		}
	}
}

// round checks every watched mount once and returns how many are still watched.
func (w *recoveredWatch) round() int {
	w.mu.Lock()
	names := make([]string, 0, len(w.mounts))
	for n := range w.mounts {
		if !w.pending[n] {
			names = append(names, n)
		}
	}
	w.mu.Unlock()
	for _, name := range names {
		if len(w.m.table.Users(name)) == 0 {
			// Stopped, or lingering with no pod: nobody to tell, and the next publish of its
			// key checks it before binding.
			w.forget(name)
			continue
		}
		if w.dead(name) {
			w.mu.Lock()
			vol := w.mounts[name]
			w.mu.Unlock()
			w.forget(name)
			w.m.onSharedStatus(name, vol, &handoff.Status{State: handoff.StateExited, Message: recoveredGone}, w.m.cfg.Log)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.mounts)
}

func (w *recoveredWatch) forget(name string) {
	w.mu.Lock()
	delete(w.mounts, name)
	w.mu.Unlock()
}

// dead reports whether the mount's connection is gone (ENOTCONN, ECONNABORTED) or answered
// by the mounter in its gcsfuse's place (EIO). A statfs that does not return within
// recoveredCheckWait is left pending, and the mount skipped until it returns.
func (w *recoveredWatch) dead(name string) bool {
	done := make(chan error, 1)
	w.mu.Lock()
	w.pending[name] = true
	w.mu.Unlock()
	go func() { // ends with the statfs; one on a hung mount ends when its mount does
		var st unix.Statfs_t
		err := unix.Statfs(w.m.mountPath(name), &st)
		w.mu.Lock()
		delete(w.pending, name)
		w.mu.Unlock()
		done <- err
	}()
	timer := time.NewTimer(recoveredCheckWait)
	defer timer.Stop()
	select {
	case err := <-done:
		return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EIO)
	case <-timer.C:
		return false
	}
}

// recoveredGone is the end of a mount found at start-up whose connection the node plugin
// finds dead: its gcsfuse, or the whole mounter, ended after the node plugin restarted.
const recoveredGone = "found dead by the node plugin (its gcsfuse, or the node's shared mounter, ended after the node plugin restarted, so no report came): kubectl describe the gcsfuse-csi-mounter pod of this node"
