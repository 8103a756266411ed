// Package firstseen lets tests observe, through inotify, the first moment a name appears in a
// directory: whether it was created there or moved in, and who owned it at that moment. A
// test that only looks after the fact sees the final state and cannot tell whether a reader
// woken by the name could have met a half-prepared file.
package firstseen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// eventBufSize holds a full batch of inotify events with the longest names.
const eventBufSize = 64 * (unix.SizeofInotifyEvent + unix.NAME_MAX + 1)

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

// Watch records the first appearance of one name in one directory. Start it with Start and
// release it with Close.
type Watch struct {
	dir, name string
	f         *os.File
	once      sync.Once
	first     chan Appearance // buffered, written at most once
	done      chan struct{}   // closed when the reader has ended
	closeOnce sync.Once
}

// Start watches dir for name. Only appearances after Start returns are reported.
func Start(dir, name string) (*Watch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("watch %s: %w", dir, err)
	}
	w := &Watch{dir: dir, name: name, f: os.NewFile(uintptr(fd), "inotify"), first: make(chan Appearance, 1), done: make(chan struct{})}
	go w.read() // owned by w: ends when Close closes the descriptor
	return w, nil
}

// Wait returns the first appearance, waiting at most d for it.
func (w *Watch) Wait(d time.Duration) (Appearance, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case a := <-w.first:
		w.first <- a // keep it for a later Wait
		return a, nil
	case <-t.C:
		return Appearance{}, fmt.Errorf("%s did not appear in %s within %s", w.name, w.dir, d)
	}
}

// Close stops the watch and waits for its reader.
func (w *Watch) Close() {
	w.closeOnce.Do(func() {
		_ = w.f.Close() // wakes the reader: the descriptor is in Go's poller
		<-w.done
	})
}

func (w *Watch) read() {
	defer close(w.done)
	buf := make([]byte, eventBufSize)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				fmt.Fprintln(os.Stderr, "firstseen: read inotify:", err)
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if cstring(raw) != w.name {
				continue
			}
			a := Appearance{MovedIn: ev.Mask&unix.IN_MOVED_TO != 0, Seen: time.Now()}
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(w.dir, w.name), &st); err != nil {
				a.StatErr = err
			} else {
				a.UID, a.GID = st.Uid, st.Gid
			}
			w.once.Do(func() { w.first <- a })
		}
	}
}

// cstring cuts the NUL padding inotify adds to names.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
