package nodevolume

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
)

// Store is what the node plugin process knows of its targets, in one place behind one
// interface (as csi-driver-host-path's state.State): the calls in flight (one at a time per
// target), what each published target was published with (to answer the kubelet's repeated
// calls), the offers that wait for or relay a gcsfuse (to stop them), and each shared
// target's latest credentials (to hand a mount another pod's token). A restarted process
// starts empty and finds its targets again in the mount table (the mounters' recovery).
type Store interface {
	// Begin starts a call on target, Aborted while another runs (the kubelet retries);
	// end ends it.
	Begin(target string) (end func(), err error)
	// Publication is target's, if this process published it.
	Publication(target string) (Publication, bool)
	// Remember records target's publication; Forget forgets it.
	Remember(target string, p Publication)
	Forget(target string)
	// Published is the number of publications.
	Published() int

	// PutOffer keeps an offer by its key: a target (the sidecar mode) or a shared mount's
	// name (the shared mode; never an absolute path, so the two never meet). TakeOffer
	// removes and returns it (nil if none).
	PutOffer(key string, o *handoff.Offer)
	TakeOffer(key string) *handoff.Offer

	// PutPlan records a shared target's mount and latest credentials; Plan returns them.
	PutPlan(target string, p SharedPlan)
	Plan(target string) (SharedPlan, bool)
	// TakePlan forgets target's plan and returns it with the plans of the other targets of
	// its mount, in one look.
	TakePlan(target string) (gone SharedPlan, ok bool, others []SharedPlan)
}

// Publication is what is remembered of a published target, to answer repeated calls.
type Publication struct {
	VolumeID string
	Volume   handoff.Volume
}

// SharedPlan is a shared target's mount and latest credentials (its pod's token: in memory
// only, never logged).
type SharedPlan struct {
	Mount string
	Plan  *credentials.Plan
}

// memStore is the Store of one node plugin process.
type memStore struct {
	mu        sync.Mutex
	inflight  map[string]bool
	published map[string]Publication
	offers    map[string]*handoff.Offer
	plans     map[string]SharedPlan
}

// NewStore returns an empty in-memory Store.
func NewStore() Store {
	return &memStore{inflight: map[string]bool{}, published: map[string]Publication{},
		offers: map[string]*handoff.Offer{}, plans: map[string]SharedPlan{}}
}

func (t *memStore) Begin(target string) (func(), error) {
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

func (t *memStore) Publication(target string) (Publication, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.published[target]
	return p, ok
}

func (t *memStore) Remember(target string, p Publication) {
	t.mu.Lock()
	t.published[target] = p
	t.mu.Unlock()
}

func (t *memStore) Forget(target string) {
	t.mu.Lock()
	delete(t.published, target)
	t.mu.Unlock()
}

func (t *memStore) Published() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.published)
}

func (t *memStore) PutOffer(key string, o *handoff.Offer) {
	t.mu.Lock()
	t.offers[key] = o
	t.mu.Unlock()
}

func (t *memStore) TakeOffer(key string) *handoff.Offer {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.offers[key]
	delete(t.offers, key)
	return o
}

func (t *memStore) PutPlan(target string, p SharedPlan) {
	t.mu.Lock()
	t.plans[target] = p
	t.mu.Unlock()
}

func (t *memStore) Plan(target string) (SharedPlan, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.plans[target]
	return p, ok
}

func (t *memStore) TakePlan(target string) (SharedPlan, bool, []SharedPlan) {
	t.mu.Lock()
	defer t.mu.Unlock()
	gone, ok := t.plans[target]
	delete(t.plans, target)
	if !ok {
		return gone, false, nil
	}
	var others []SharedPlan
	for _, p := range t.plans {
		if p.Mount == gone.Mount {
			others = append(others, p)
		}
	}
	return gone, true, others
}
