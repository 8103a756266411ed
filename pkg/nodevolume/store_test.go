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
	if _, err := s.Begin("/t/a"); status.Code(err) != codes.Aborted {
		t.Fatalf("a call on /t/a after another target's end: %v, want Aborted", err)
	}
	end()
	end2, err := s.Begin("/t/a")
	if err != nil {
		t.Fatalf("after the end: %v", err)
	}
	end2()
}

// Publications and offers are kept by target until forgotten or taken, once; another
// target's stay as they were.
func TestStoreKeepsPublicationsAndOffers(t *testing.T) {
	s := NewStore()
	if _, ok := s.Publication("/t/a"); ok || s.Published() != 0 {
		t.Fatal("a new store has a publication")
	}
	s.Remember("/t/a", Publication{VolumeID: "v", Volume: handoff.Volume{VolumeName: "data", Bucket: "bkt", ReadOnly: true}})
	s.Remember("/t/b", Publication{VolumeID: "w"})
	if p, ok := s.Publication("/t/a"); !ok || p.VolumeID != "v" || p.Volume.Bucket != "bkt" || !p.Volume.ReadOnly || s.Published() != 2 {
		t.Fatalf("publication = %+v %v, count %d", p, ok, s.Published())
	}
	s.Remember("/t/a", Publication{VolumeID: "v2"}) // a recovery's record replaces the old one
	if p, _ := s.Publication("/t/a"); p.VolumeID != "v2" || s.Published() != 2 {
		t.Fatalf("publication remembered again = %+v, count %d; want v2, 2", p, s.Published())
	}
	s.Forget("/t/a")
	if _, ok := s.Publication("/t/a"); ok || s.Published() != 1 {
		t.Fatal("forgotten publication still there")
	}
	if p, ok := s.Publication("/t/b"); !ok || p.VolumeID != "w" {
		t.Fatalf("another target's publication after a Forget: %+v %v", p, ok)
	}
	s.Forget("/t/never") // forgetting what is not there changes nothing
	if s.Published() != 1 {
		t.Fatalf("count %d after forgetting an unknown target, want 1", s.Published())
	}
	if s.TakeOffer("/t/a") != nil {
		t.Fatal("an offer nobody put")
	}
	target, mount := &handoff.Offer{}, &handoff.Offer{}
	s.PutOffer("/t/a", target)
	s.PutOffer("bkt-1", mount) // a shared mount's, by its name
	if s.Published() != 1 {
		t.Fatalf("offers counted as publications: %d, want 1", s.Published())
	}
	if got := s.TakeOffer("/t/a"); got != target {
		t.Fatalf("TakeOffer = %p, want the target's %p", got, target)
	}
	if s.TakeOffer("/t/a") != nil {
		t.Fatal("an offer taken twice")
	}
	if got := s.TakeOffer("bkt-1"); got != mount {
		t.Fatalf("the mount's offer = %p, want %p", got, mount)
	}
	// A new offer for a target replaces the one before (a recovery's offer again).
	first, second := &handoff.Offer{}, &handoff.Offer{}
	s.PutOffer("/t/a", first)
	s.PutOffer("/t/a", second)
	if got := s.TakeOffer("/t/a"); got != second {
		t.Fatalf("TakeOffer after two puts = %p, want the second %p", got, second)
	}
}

// A shared target's plan is what was put last for it, and another target's is its own.
func TestStorePlansByTarget(t *testing.T) {
	s := NewStore()
	if _, ok := s.Plan("/t/a"); ok {
		t.Fatal("a new store has a plan")
	}
	old := &credentials.Plan{Kind: credentials.KindFederation, Identity: "old"}
	fresh := &credentials.Plan{Kind: credentials.KindFederation, Identity: "fresh"}
	s.PutPlan("/t/a", SharedPlan{Mount: "a-1", Plan: old})
	s.PutPlan("/t/b", SharedPlan{Mount: "a-1", Plan: old})
	s.PutPlan("/t/a", SharedPlan{Mount: "a-1", Plan: fresh})
	if p, ok := s.Plan("/t/a"); !ok || p.Mount != "a-1" || p.Plan != fresh {
		t.Fatalf("Plan(/t/a) = %+v %v, want a-1 with the fresh plan", p, ok)
	}
	if p, ok := s.Plan("/t/b"); !ok || p.Plan != old {
		t.Fatalf("Plan(/t/b) = %+v %v, want its own", p, ok)
	}
	if gone, ok, others := s.TakePlan("/t/never"); ok || others != nil || gone.Plan != nil {
		t.Fatalf("TakePlan of an unknown target = %+v %v %+v", gone, ok, others)
	}
	if _, ok := s.Plan("/t/b"); !ok {
		t.Fatal("TakePlan of an unknown target took another's")
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
	for target, id := range map[string]string{"/t/staying": "staying", "/t/other": "other"} {
		if p, ok := s.Plan(target); !ok || p.Plan.Identity != id {
			t.Errorf("Plan(%s) after another's TakePlan = %+v %v", target, p, ok)
		}
	}
	if _, ok, others := s.TakePlan("/t/leaving"); ok || others != nil {
		t.Fatal("a plan taken twice")
	}
}
