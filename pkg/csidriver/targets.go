package csidriver

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
)

// targetState is what the Node service knows of its targets, behind one interface (as
// csi-driver-host-path's state.State): which have a call in flight (one at a time per
// target) and what each published target was published with, to answer the kubelet's
// repeated calls. The mounters keep their own mode's state (sidecarMounter: the offers;
// the shared mode: the table and its plans, shared.go).
type targetState interface {
	// begin starts a call on target, Aborted while another runs (the kubelet retries);
	// end ends it.
	begin(target string) (end func(), err error)
	// get is target's publication, if this process published it.
	get(target string) (publication, bool)
	// put records target's publication; drop forgets it.
	put(target string, p publication)
	drop(target string)
	// count is the number of publications.
	count() int
}

// publication is what we remember about a published target, to answer repeated calls.
type publication struct {
	volumeID string
	volume   handoff.Volume
}

// memTargets is the targetState of one node plugin process: a restart starts empty, and
// finds its targets again in the mount table (republish compares what it shows).
type memTargets struct {
	mu        sync.Mutex
	inflight  map[string]bool
	published map[string]publication
}

func newMemTargets() *memTargets {
	return &memTargets{inflight: map[string]bool{}, published: map[string]publication{}}
}

func (t *memTargets) begin(target string) (func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inflight[target] {
		return nil, status.Errorf(codes.Aborted, "an operation on %s is already in progress", target)
	}
	t.inflight[target] = true
	return func() {
		t.mu.Lock()
		delete(t.inflight, target)
		t.mu.Unlock()
	}, nil
}

func (t *memTargets) get(target string) (publication, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.published[target]
	return p, ok
}

func (t *memTargets) put(target string, p publication) {
	t.mu.Lock()
	t.published[target] = p
	t.mu.Unlock()
}

func (t *memTargets) drop(target string) {
	t.mu.Lock()
	delete(t.published, target)
	t.mu.Unlock()
}

func (t *memTargets) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.published)
}
