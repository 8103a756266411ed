// Package dirwatch reports names that appear in directories, through inotify. The sidecar
// uses it to learn of hand-off sockets and the exit file the moment they are created, with
// no polling interval to pay.
package dirwatch

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Event is a name that appeared in a watched directory, or an overflow.
type Event struct {
	Dir  string // as given to Add
	Name string
	// Overflow (Dir and Name empty) says the kernel's event queue overflowed and dropped
	// events, in any watched directory: inotify then cannot say which names appeared, so
	// the consumer must list every watched directory again and treat what it finds as
	// created. Without it, a burst of creations (many sockets at once) would lose names.
	Overflow bool
}

// Watcher delivers Events on C until Close.
type Watcher struct {
	C   <-chan Event
	c   chan Event
	f   *os.File
	mu  sync.Mutex
	wds map[int32]string

	closeOnce sync.Once
	stop      chan struct{} // closed by Close: the reader never blocks on an unread C
	done      chan struct{}
}

// New starts a watcher. Close must be called to release it.
func New() (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify_init1: %w", err)
	}
	c := make(chan Event, eventBuffer)
	w := &Watcher{C: c, c: c, f: os.NewFile(uintptr(fd), "inotify"), wds: map[int32]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.read()
	return w, nil
}

// Add watches dir for names created in it or moved into it.
func (w *Watcher) Add(dir string) error {
	raw, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var wd int
	var aerr error
	if err := raw.Control(func(fd uintptr) {
		wd, aerr = unix.InotifyAddWatch(int(fd), dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
	}); err != nil {
		return err
	}
	if aerr != nil {
		return fmt.Errorf("watch %s: %w", dir, aerr)
	}
	w.mu.Lock()
	w.wds[int32(wd)] = dir
	w.mu.Unlock()
	return nil
}

// Close stops the watcher and closes C once the reader has ended.
func (w *Watcher) Close() error {
	var err error
	w.closeOnce.Do(func() {
		close(w.stop)
		err = w.f.Close()
		<-w.done
	})
	return err
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

// deliver sends the events of one read(2) on C, and reports false when Close stopped it.
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
			out = Event{Dir: w.wds[ev.Wd], Name: name}
			w.mu.Unlock()
		}
		select {
		case w.c <- out:
		case <-w.stop:
			return false
		}
	}
	return true
}
