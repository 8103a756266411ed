// Package expiring is a set whose members are forgotten a fixed time after they were added:
// "have we already done this for that pod?" for pods whose UIDs stop mattering once they
// are gone, without a map that grows for the life of the process.
package expiring

import (
	"sync"
	"time"
)

// Set is safe for concurrent use; the zero value is not usable, use New.
type Set[K comparable] struct {
	ttl time.Duration
	mu  sync.Mutex
	at  map[K]time.Time
}

// New returns a set that forgets a member ttl after it was added.
func New[K comparable](ttl time.Duration) *Set[K] {
	return &Set[K]{ttl: ttl, at: map[K]time.Time{}}
}

// Add adds k at now and reports whether it was new (absent, or forgotten). Members older
// than the ttl are dropped on the way, so the set holds what the last ttl added.
func (s *Set[K]) Add(k K, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for m, at := range s.at {
		if now.Sub(at) > s.ttl {
			delete(s.at, m)
		}
	}
	if _, ok := s.at[k]; ok {
		return false
	}
	s.at[k] = now
	return true
}
