// Package dirwatch reports names that appear in directories, through inotify. The sidecar
// uses it to learn of hand-off sockets and the exit file the moment they are created, with
// no polling interval to pay. Where the kernel refuses an inotify instance it falls back
// to listing the directories every PollInterval: every sidecar of a node runs as uid 65534,
// so they all share that user's fs.inotify.max_user_instances (128 on most distributions,
// fewer than the 110-250 pods a node runs), and a sidecar that could not watch would leave
// its pod's app waiting on a mount nobody serves.
//
// It is the module's one inotify reader (test/layout keeps it so): tests that must see the
// moment a name appears (internal/testing/firstseen) read their events through it too, with
// OnEvent, so that the event parsing, the overflow and the reader's bounds exist once.
package dirwatch

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PollInterval is how often a polling Watcher lists its directories: the delay it adds,
// at most, to noticing a hand-off socket or the exit file.
const PollInterval = 100 * time.Millisecond

// inotifyInit makes an inotify instance; a variable so that tests can make it fail.
var inotifyInit = func() (int, error) { return unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK) }

// inotifyAddWatch watches dir on the instance fd; a variable so that a test can widen the
// window between the kernel's watch and Add's record of it.
var inotifyAddWatch = func(fd int, dir string) (int, error) {
	return unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
}

// Event is a name that appeared in a watched directory, or an overflow.
type Event struct {
	Dir  string // as given to Add
	Name string
	// MovedIn is true when inotify reported a rename into Dir (IN_MOVED_TO), false when the
	// name was created there (open, mknod, bind, mkdir, symlink). A test needs the
	// difference: a socket must never appear under its final name by bind, with bind's
	// owner. A polling Watcher cannot tell, and leaves it false.
	MovedIn bool
	// Overflow (Dir and Name empty) says the kernel's event queue overflowed and dropped
	// events, in any watched directory: inotify then cannot say which names appeared, so
	// the consumer must list every watched directory again and treat what it finds as
	// created. Without it, a burst of creations (many sockets at once) would lose names.
	Overflow bool
}

// Watcher delivers Events on C until Close, or to the handler given with OnEvent.
type Watcher struct {
	// C carries the Events, and is closed once the reader has ended. With OnEvent it
	// carries none and only closes.
	C <-chan Event
	// Polling is set when the kernel refused an inotify instance (Fallback says why): the
	// directories are listed every PollInterval instead.
	Polling  bool
	Fallback error
	c        chan Event
	handle   func(Event) // set by OnEvent: called instead of sending on c
	f        *os.File    // the inotify instance; nil when polling
	mu       sync.Mutex
	wds      map[int32]string
	// listed holds, when polling, each directory's names at its last listing.
	listed map[string]map[string]bool

	closeOnce sync.Once
	stop      chan struct{} // closed by Close: the reader never blocks on an unread C
	done      chan struct{}
}

// Option changes how New's Watcher delivers its events.
type Option func(*Watcher)

// OnEvent makes the Watcher call handle with each Event in its reader goroutine, the moment
// the event is read (polling: listed), instead of sending it on C. It is for a consumer
// that must look at the name before anything else happens to it: firstseen stats a new
// socket's name to learn who owned it when it appeared, and the hop through C's buffer to
// another goroutine could let the publisher finish a chown in between, hiding the very
// state the test looks for. While handle runs the reader reads nothing else, so it must
// return promptly; it must not call Close, which waits for the reader. Once Close has
// returned, handle is not called again.
func OnEvent(handle func(Event)) Option {
	return func(w *Watcher) { w.handle = handle }
}

// New starts a watcher: inotify, or polling when the kernel refuses an instance for want
// of one (EMFILE: the user's or the process's limit; ENFILE, ENOMEM: the system's). Close
// must be called to release it.
func New(opts ...Option) (*Watcher, error) {
	c := make(chan Event, eventBuffer)
	w := &Watcher{C: c, c: c, wds: map[int32]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(w)
	}
	fd, err := inotifyInit()
	switch {
	case err == nil:
		w.f = os.NewFile(uintptr(fd), "inotify")
		go w.read()
	case errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOMEM):
		w.Polling, w.Fallback = true, fmt.Errorf("inotify_init1: %w", err)
		w.listed = map[string]map[string]bool{}
		go w.poll()
	default:
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	return w, nil
}

// Add watches dir for names created in it or moved into it.
func (w *Watcher) Add(dir string) error {
	if w.Polling {
		names, err := listNames(dir)
		if err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		w.mu.Lock()
		w.listed[dir] = names // only names that appear from now on are reported
		w.mu.Unlock()
		return nil
	}
	raw, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	// The lock is held from before the watch until it is recorded: the kernel may queue an
	// event the moment the watch exists, and the reader, which looks the watch up under the
	// lock, must find it known rather than report the event with no Dir.
	w.mu.Lock()
	defer w.mu.Unlock()
	var wd int
	var aerr error
	if err := raw.Control(func(fd uintptr) {
		wd, aerr = inotifyAddWatch(int(fd), dir)
	}); err != nil {
		return err
	}
	if aerr != nil {
		return fmt.Errorf("watch %s: %w", dir, aerr)
	}
	w.wds[int32(wd)] = dir
	return nil
}

// Close stops the watcher and closes C once the reader has ended.
func (w *Watcher) Close() error {
	var err error
	w.closeOnce.Do(func() {
		close(w.stop)
		if w.f != nil {
			err = w.f.Close()
		}
		<-w.done
	})
	return err
}

// poll lists the watched directories every PollInterval and reports the names that were
// not there at the previous listing, until Close. A directory that cannot be listed (gone)
// is skipped, as inotify drops a removed directory's watch.
func (w *Watcher) poll() {
	defer close(w.done)
	defer close(w.c)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		w.mu.Lock()
		dirs := make([]string, 0, len(w.listed))
		for d := range w.listed {
			dirs = append(dirs, d)
		}
		w.mu.Unlock()
		for _, dir := range dirs {
			names, err := listNames(dir)
			if err != nil {
				continue
			}
			w.mu.Lock()
			before := w.listed[dir]
			w.listed[dir] = names
			w.mu.Unlock()
			for n := range names {
				if before[n] {
					continue
				}
				if !w.emit(Event{Dir: dir, Name: n}) {
					return
				}
			}
		}
	}
}

// listNames lists dir without following a symlink in its place (as IN_DONT_FOLLOW does).
func listNames(dir string) (map[string]bool, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names, nil
}

// Buffer sizes of the reader.
const (
	// eventBuffer is C's capacity: a burst is queued here before the kernel's own queue
	// (fs.inotify.max_queued_events) has to hold it.
	eventBuffer = 64
	// readBatch is how many events with maximal names one read(2) can return.
	readBatch = 64
)

func (w *Watcher) read() {
	defer close(w.done)
	defer close(w.c)
	buf := make([]byte, readBatch*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				fmt.Fprintln(os.Stderr, "dirwatch: read inotify:", err)
			}
			return
		}
		if !w.deliver(buf[:n]) {
			return
		}
	}
}

// deliver emits the events of one read(2), and reports false when Close stopped it.
// An IN_Q_OVERFLOW record becomes an Overflow event; events that name nothing (a watch
// removed, say) are dropped.
func (w *Watcher) deliver(buf []byte) bool {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		end := min(off+unix.SizeofInotifyEvent+int(ev.Len), len(buf))
		nameBytes := buf[off+unix.SizeofInotifyEvent : end]
		off = end
		var out Event
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			out.Overflow = true
		} else {
			name := string(nameBytes)
			for i := 0; i < len(name); i++ {
				if name[i] == 0 {
					name = name[:i]
					break
				}
			}
			if name == "" {
				continue
			}
			w.mu.Lock()
			out = Event{Dir: w.wds[ev.Wd], Name: name, MovedIn: ev.Mask&unix.IN_MOVED_TO != 0}
			w.mu.Unlock()
		}
		if !w.emit(out) {
			return false
		}
	}
	return true
}

// emit hands ev to the OnEvent handler, or sends it on C, and reports false when Close
// stopped it. A handler is not called once Close has begun: Close then only waits for a
// call already running.
func (w *Watcher) emit(ev Event) bool {
	if w.handle != nil {
		select {
		case <-w.stop:
			return false
		default:
		}
		w.handle(ev)
		return true
	}
	select {
	case w.c <- ev:
		return true
	case <-w.stop:
		return false
	}
}
