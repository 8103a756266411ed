package nodevolume

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
)

// One call at a time per target: a second is Aborted (the kubelet retries it), a call on
// another target is not held, and the end lets the next one in.
func TestStoreOneCallPerTarget(t *testing.T) {
	s := NewStore()
	end, err := s.Begin("/t/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin("/t/a"); status.Code(err) != codes.Aborted {
		t.Fatalf("second call on /t/a: %v, want Aborted", err)
	}
	endB, err := s.Begin("/t/b")
	if err != nil {
		t.Fatalf("a call on another target held: %v", err)
	}
	endB()
	end()
	end2, err := s.Begin("/t/a")
	if err != nil {
		t.Fatalf("after the end: %v", err)
	}
	end2()
}

// Publications and offers are kept by target until forgotten or taken, once.
func TestStoreKeepsPublicationsAndOffers(t *testing.T) {
	s := NewStore()
	s.Remember("/t/a", Publication{VolumeID: "v"})
	if p, ok := s.Publication("/t/a"); !ok || p.VolumeID != "v" || s.Published() != 1 {
		t.Fatalf("publication = %+v %v, count %d", p, ok, s.Published())
	}
	s.Forget("/t/a")
	if _, ok := s.Publication("/t/a"); ok || s.Published() != 0 {
		t.Fatal("forgotten publication still there")
	}
	if s.TakeOffer("/t/a") != nil {
		t.Fatal("an offer nobody put")
	}
	target, mount := &handoff.Offer{}, &handoff.Offer{}
	s.PutOffer("/t/a", target)
	s.PutOffer("bkt-1", mount) // a shared mount's, by its name
	if got := s.TakeOffer("/t/a"); got != target {
		t.Fatalf("TakeOffer = %p, want the target's %p", got, target)
	}
	if s.TakeOffer("/t/a") != nil {
		t.Fatal("an offer taken twice")
	}
	if got := s.TakeOffer("bkt-1"); got != mount {
		t.Fatalf("the mount's offer = %p, want %p", got, mount)
	}
}

// TakePlan returns the leaving target's plan with the other plans of its mount only, and
// forgets it: a token is never handed across mounts (another key: another identity).
func TestTakePlanSeesOnlyItsMount(t *testing.T) {
	s := NewStore()
	plan := func(id string) *credentials.Plan {
		return &credentials.Plan{Kind: credentials.KindFederation, Identity: id}
	}
	s.PutPlan("/t/leaving", SharedPlan{Mount: "a-1", Plan: plan("leaving")})
	s.PutPlan("/t/staying", SharedPlan{Mount: "a-1", Plan: plan("staying")})
	s.PutPlan("/t/other", SharedPlan{Mount: "b-1", Plan: plan("other")})
	gone, ok, others := s.TakePlan("/t/leaving")
	if !ok || gone.Plan.Identity != "leaving" || len(others) != 1 || others[0].Plan.Identity != "staying" {
		t.Fatalf("TakePlan = %+v %v %+v; want leaving, with staying only", gone, ok, others)
	}
	if _, ok := s.Plan("/t/leaving"); ok {
		t.Fatal("the taken plan stayed")
	}
	if _, ok, others := s.TakePlan("/t/leaving"); ok || others != nil {
		t.Fatal("a plan taken twice")
	}
}
