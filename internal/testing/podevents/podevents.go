// Package podevents is a nodevolume.EventSink for tests: it keeps every Event recorded.
package podevents

import (
	"slices"
	"sync"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
)

// Event is one recorded Event.
type Event struct {
	Pod     nodevolume.PodRef
	Warning bool
	Reason  string
	Msg     string
}

// Recorder keeps the Events recorded on it, in order; safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// PodEvent records one Event.
func (r *Recorder) PodEvent(pod nodevolume.PodRef, warning bool, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{pod, warning, reason, msg})
}

// Events returns the Events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Count is the number of Events recorded with reason.
func (r *Recorder) Count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Reason == reason {
			n++
		}
	}
	return n
}
