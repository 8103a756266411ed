package lifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

func TestFollowVerdict(t *testing.T) {
	sc := contract.SidecarContainerName
	rc := func(name, state string) RuntimeContainer {
		return RuntimeContainer{Name: name, ID: name, State: state, Exited: state == "exited"}
	}
	stopping := legacyPod([]string{"app", "log"}, deleting())
	withStatus := func(p *corev1.Pod, opts ...podOpt) *corev1.Pod {
		p = p.DeepCopy()
		for _, o := range opts {
			o(p)
		}
		return p
	}
	users := []string{"app", "log"}
	tests := []struct {
		name    string
		look    FollowLook
		release bool
		awaited string // a part of the reason, when not released
	}{
		{"the runtime lists nothing: it may not know the pod",
			FollowLook{Pod: stopping, Followed: users, Terminating: true}, false, "lists no container"},
		{"a followed container runs",
			FollowLook{Pod: stopping, Followed: users, Listed: []RuntimeContainer{rc("app", "running"), rc("log", "exited")}}, false, `"app" is running`},
		{"a followed container is created",
			FollowLook{Pod: stopping, Followed: users, Listed: []RuntimeContainer{rc("app", "exited"), rc("log", "created")}}, false, `"log" is created`},
		{"a followed container's state is unknown",
			FollowLook{Pod: stopping, Followed: users, Listed: []RuntimeContainer{rc("app", "unknown"), rc("log", "exited")}}, false, `"app" is unknown`},
		{"an older attempt exited, the newer one runs",
			FollowLook{Pod: stopping, Followed: users, Listed: []RuntimeContainer{rc("app", "exited"), rc("app", "running"), rc("log", "exited")}}, false, `"app" is running`},
		{"every followed container exited; the sidecar and others still run",
			FollowLook{Pod: stopping, Followed: users, Listed: []RuntimeContainer{rc("app", "exited"), rc("log", "exited"), rc(sc, "running"), rc("other", "running")}}, true, ""},
		{"a followed container not listed, no API status: it may still start",
			FollowLook{Pod: stopping, Followed: users, Listed: []RuntimeContainer{rc("app", "exited"), rc(sc, "running")}}, false, `"log" is not in the runtime yet`},
		{"not listed, and the API shows it never ran",
			FollowLook{Pod: withStatus(stopping, statuses(creating("log"))), Followed: users, Listed: []RuntimeContainer{rc("app", "exited")}}, false, `"log" is not in the runtime yet`},
		{"not listed, and the API shows it running (the runtime removed it?)",
			FollowLook{Pod: withStatus(stopping, statuses(running("log"))), Followed: users, Listed: []RuntimeContainer{rc("app", "exited")}}, false, `"log" is not in the runtime yet`},
		{"not listed, the API shows it terminated",
			FollowLook{Pod: withStatus(stopping, statuses(terminated("log", 0, t1))), Followed: users, Listed: []RuntimeContainer{rc("app", "exited")}}, true, ""},
		{"not listed, the API shows it waiting after a run: the stopping pod will not run it again",
			FollowLook{Pod: withStatus(stopping, statuses(backOff("log", 1, t1))), Followed: users, Listed: []RuntimeContainer{rc("app", "exited")}}, true, ""},
		{"not listed, an init container the API shows terminated",
			FollowLook{Pod: withStatus(stopping, initStatuses(terminated("fetch", 0, t1))), Followed: []string{"fetch", "app"}, Listed: []RuntimeContainer{rc("app", "exited")}}, true, ""},
		{"not listed: a regular container's status is read before an init container's",
			FollowLook{Pod: withStatus(stopping, statuses(running("log")), initStatuses(terminated("log", 0, t1))), Followed: users, Listed: []RuntimeContainer{rc("app", "exited")}}, false, `"log" is not in the runtime yet`},
		{"not listed, but the kubelet is stopping the pod: it starts nothing more",
			FollowLook{Pod: stopping, Followed: users, Terminating: true, Listed: []RuntimeContainer{rc(sc, "running")}}, true, ""},
		{"pod unknown to the cache: every container but the sidecar, one runs",
			FollowLook{Pod: &corev1.Pod{}, AllButSidecar: true, Listed: []RuntimeContainer{rc("x", "exited"), rc("y", "running"), rc(sc, "running")}}, false, `"y" is running`},
		{"pod unknown to the cache: only the sidecar runs; absent containers are not waited for",
			FollowLook{Pod: &corev1.Pod{}, AllButSidecar: true, Followed: users, Listed: []RuntimeContainer{rc("x", "exited"), rc(sc, "running")}}, true, ""},
		{"pod unknown to the cache, nothing listed",
			FollowLook{Pod: &corev1.Pod{}, AllButSidecar: true}, false, "lists no container"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.look.Pod.DeepCopy()
			release, awaited := FollowVerdict(tt.look)
			if release != tt.release || (tt.release && awaited != "") || !strings.Contains(awaited, tt.awaited) {
				t.Fatalf("FollowVerdict = %v, %q; want %v, %q", release, awaited, tt.release, tt.awaited)
			}
			if !equalPods(before, tt.look.Pod) {
				t.Error("FollowVerdict modified the pod")
			}
		})
	}
}

func TestReleaseConfirmation(t *testing.T) {
	type look struct {
		releasable bool
		at         time.Duration // after t0
		reset      bool          // a look that could not list the runtime, instead
		release    bool
		since      time.Duration // after t0, when releasable
	}
	ms := time.Millisecond
	tests := []struct {
		name  string
		looks []look
	}{
		{"one look never releases", []look{{releasable: true, at: 0, since: 0}}},
		{"two looks a gap apart release, since the first", []look{
			{releasable: true, at: 0, since: 0}, {releasable: true, at: ReleaseGap, release: true, since: 0}}},
		{"two looks too close: the next one releases", []look{
			{releasable: true, at: 0, since: 0}, {releasable: true, at: 20 * ms, since: 0},
			{releasable: true, at: ReleaseGap, release: true, since: 0}}},
		{"a look that finds a container running starts over", []look{
			{releasable: true, at: 0, since: 0}, {releasable: false, at: 100 * ms},
			{releasable: true, at: 200 * ms, since: 200 * ms}, {releasable: true, at: 250 * ms, since: 200 * ms},
			{releasable: true, at: 300 * ms, release: true, since: 200 * ms}}},
		{"a look that cannot list the runtime starts over", []look{
			{releasable: true, at: 0, since: 0}, {reset: true, at: 100 * ms},
			{releasable: true, at: 200 * ms, since: 200 * ms}, {releasable: true, at: 300 * ms, release: true, since: 200 * ms}}},
		{"nothing releasable", []look{{at: 0}, {at: time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c ReleaseConfirmation
			for i, l := range tt.looks {
				if l.reset {
					c.Reset()
					continue
				}
				release, since := c.Look(l.releasable, t0.Add(l.at))
				wantSince := time.Time{}
				if l.releasable {
					wantSince = t0.Add(l.since)
				}
				if release != l.release || !since.Equal(wantSince) {
					t.Fatalf("look %d at %s: release %v since %s, want %v since %s", i, l.at, release, since.Sub(t0), l.release, wantSince.Sub(t0))
				}
			}
		})
	}
}
