// Package syncbuf is a goroutine-safe output buffer for tests and test harnesses: a child
// process or a logger writes to it while the test reads it.
package syncbuf

import (
	"bytes"
	"io"
	"sync"
)

// Buffer collects what is written to it; Echo, if set, also receives a copy of each write.
// The zero value is ready to use.
type Buffer struct {
	Echo io.Writer

	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p (and copies it to Echo).
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Echo != nil {
		_, _ = l.Echo.Write(p)
	}
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
