// Package firstseen lets tests observe, through inotify, the first moment a name appears in a
// directory: whether it was created there or moved in, and who owned it at that moment. A
// test that only looks after the fact sees the final state and cannot tell whether a reader
// woken by the name could have met a half-prepared file.
//
// It reads its events through pkg/dirwatch, the module's one inotify reader, with
// dirwatch.OnEvent: the name is stat'ed in dirwatch's reader goroutine as soon as its event
// is read, with no hop through a channel to another goroutine that would give the
// publisher time to finish (a chown, say) before the stat and hide what the test looks for.
package firstseen

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/dirwatch"
)

// Appearance is how a name first appeared.
type Appearance struct {
	// MovedIn is true when the name appeared by a rename into the directory, false when it
	// was created under that name (open, mknod, bind, mkdir, symlink).
	MovedIn bool
	// UID and GID own the name as stat'ed right after the event was read; StatErr is set
	// when the name was already gone.
	UID, GID uint32
	StatErr  error
	// Seen is when the event was read.
	Seen time.Time
}

// errOverflow is what Wait returns when the kernel dropped events before the name's: the
// name may have appeared, and even gone again, unseen, so its first appearance is unknown.
var errOverflow = errors.New("the inotify queue overflowed before the name was seen: its first appearance is unknown")

// outcome is the first appearance, or errOverflow.
type outcome struct {
	a   Appearance
	err error
}

// Watch records the first appearance of one name in one directory. Start it with Start and
// release it with Close.
type Watch struct {
	dir, name string
	w         *dirwatch.Watcher
	once      sync.Once
	first     chan outcome // buffered, written at most once
}

// Start watches dir for name. Only appearances after Start returns are reported. It fails
// where the kernel refuses an inotify instance: dirwatch's polling fallback would see the
// name up to dirwatch.PollInterval late, and could not tell a rename from a creation.
func Start(dir, name string) (*Watch, error) {
	fw := &Watch{dir: dir, name: name, first: make(chan outcome, 1)}
	w, err := dirwatch.New(dirwatch.OnEvent(fw.event))
	if err != nil {
		return nil, err
	}
	if w.Polling {
		w.Close()
		return nil, fmt.Errorf("firstseen needs inotify: %w", w.Fallback)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	fw.w = w
	return fw, nil
}

// event runs in dirwatch's reader goroutine: it stats the name at once, before the reader
// reads anything else.
func (fw *Watch) event(ev dirwatch.Event) {
	if ev.Overflow {
		fw.once.Do(func() { fw.first <- outcome{err: errOverflow} })
		return
	}
	if ev.Name != fw.name {
		return
	}
	a := Appearance{MovedIn: ev.MovedIn, Seen: time.Now()}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(fw.dir, fw.name), &st); err != nil {
		a.StatErr = err
	} else {
		a.UID, a.GID = st.Uid, st.Gid
	}
	fw.once.Do(func() { fw.first <- outcome{a: a} })
}

// Wait returns the first appearance, waiting at most d for it.
func (fw *Watch) Wait(d time.Duration) (Appearance, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case o := <-fw.first:
		fw.first <- o // keep it for a later Wait
		if o.err != nil {
			return Appearance{}, fmt.Errorf("%s in %s: %w", fw.name, fw.dir, o.err)
		}
		return o.a, nil
	case <-t.C:
		return Appearance{}, fmt.Errorf("%s did not appear in %s within %s", fw.name, fw.dir, d)
	}
}

// Close stops the watch and waits for dirwatch's reader. It may be called more than once.
func (fw *Watch) Close() {
	_ = fw.w.Close()
}
