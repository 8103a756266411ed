package webhook

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// stubDiscovery is a discovery.ServerVersionInterface whose answer the test changes.
type stubDiscovery struct {
	mu    sync.Mutex
	info  apiversion.Info
	err   error
	calls int
	// gate, when set, holds every call until it is closed: a slow API server.
	gate chan struct{}
}

func (s *stubDiscovery) ServerVersion() (*apiversion.Info, error) {
	s.mu.Lock()
	s.calls++
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		<-gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	info := s.info
	return &info, nil
}

func (s *stubDiscovery) set(info apiversion.Info, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info, s.err = info, err
}

func node(name, kubelet string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": name, corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubelet, OSImage: "cos"},
			Images:   []corev1.ContainerImage{{Names: []string{"big"}}},
		},
	}
}

// startVersions runs a KubeClusterVersions until the test ends.
func startVersions(t *testing.T, client *fake.Clientset, disco *stubDiscovery) *KubeClusterVersions {
	t.Helper()
	kv := NewKubeClusterVersions(client, disco, time.Minute, discardLogger())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { kv.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	waitFor(t, kv.Ready)
	return kv
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKubeClusterVersionsKubelets(t *testing.T) {
	client := fake.NewClientset(node("new", "v1.30.2"), node("old", "v1.28.5-gke.1217000"))
	kv := startVersions(t, client, &stubDiscovery{info: apiversion.Info{GitVersion: "v1.30.0"}})

	tests := []struct{ node, want string }{
		{"", "1.28.5"},
		{"new", "1.30.2"},
		{"old", "1.28.5"},
		{"not-registered-yet", "1.28.5"},
	}
	for _, tt := range tests {
		v, _, err := kv.MinKubeletVersion(onNode(tt.node))
		if err != nil {
			t.Fatalf("MinKubeletVersion(%q): %v", tt.node, err)
		}
		if v.String() != tt.want {
			t.Errorf("MinKubeletVersion(%q) = %s, want %s", tt.node, v, tt.want)
		}
	}

	// The cache follows the cluster: once the old node is gone, the minimum moves up.
	if err := client.CoreV1().Nodes().Delete(context.Background(), "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		v, _, err := kv.MinKubeletVersion(onNode(""))
		return err == nil && v.String() == "1.30.2"
	})

	// Only the labels and the kubelet version are kept in the cache.
	n, err := kv.nodes.Get("new")
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Status.Images) > 0 || n.Status.NodeInfo.OSImage != "" || n.Labels["pool"] != "new" {
		t.Errorf("cached node not trimmed to its labels and kubelet version: %+v", n)
	}
}

// onNode is a pod with spec.nodeName name ("": not scheduled).
func onNode(name string) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{NodeName: name}} }

// TestKubeClusterVersionsFollowThePodsSelection: on a cluster of old and new kubelets, a pod
// whose nodeSelector or required node affinity admits only new nodes is judged by those
// (the webhook can then give it a native sidecar), one that admits an old node by the
// oldest it admits, and one whose selection matches no node yet by every node.
func TestKubeClusterVersionsFollowThePodsSelection(t *testing.T) {
	client := fake.NewClientset(node("new", "v1.30.2"), node("newer", "v1.31.0"), node("old", "v1.28.5"))
	kv := startVersions(t, client, &stubDiscovery{info: apiversion.Info{GitVersion: "v1.30.0"}})
	affinity := func(op corev1.NodeSelectorOperator, values ...string) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: op, Values: values}}}},
		}}}
	}
	preferredOnly := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"new"}}}},
	}}}}
	const selected = "a node that the pod's nodeSelector and node affinity admit"
	for _, tc := range []struct {
		name      string
		selector  map[string]string
		affinity  *corev1.Affinity
		want      string
		wantWhere string
	}{
		{name: "nodeSelector of a new node", selector: map[string]string{corev1.LabelHostname: "new"}, want: "1.30.2", wantWhere: selected},
		{name: "nodeSelector of the old node", selector: map[string]string{"pool": "old"}, want: "1.28.5", wantWhere: selected},
		{name: "affinity for the new nodes", affinity: affinity(corev1.NodeSelectorOpIn, "new", "newer"), want: "1.30.2", wantWhere: selected},
		{name: "affinity away from the old node", affinity: affinity(corev1.NodeSelectorOpNotIn, "old"), want: "1.30.2", wantWhere: selected},
		{name: "affinity that admits the old node", affinity: affinity(corev1.NodeSelectorOpIn, "old", "newer"), want: "1.28.5", wantWhere: selected},
		{name: "selection and affinity together", selector: map[string]string{"pool": "newer"}, affinity: affinity(corev1.NodeSelectorOpNotIn, "old"), want: "1.31.0", wantWhere: selected},
		{name: "a selection no node matches yet", selector: map[string]string{"pool": "gpu"}, want: "1.28.5", wantWhere: anyNode},
		{name: "a preferred affinity only", affinity: preferredOnly, want: "1.28.5", wantWhere: anyNode},
		{name: "no selection", want: "1.28.5", wantWhere: anyNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: tc.selector, Affinity: tc.affinity}}
			v, where, err := kv.MinKubeletVersion(pod)
			if err != nil || v.String() != tc.want || where != tc.wantWhere {
				t.Fatalf("MinKubeletVersion = %v, %q, %v; want %s, %q", v, where, err, tc.want, tc.wantWhere)
			}
		})
	}

	// The mode follows: native where only new nodes are admitted, legacy naming why where
	// the old one is.
	newOnly := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": "new"}}}
	if c := chooseMode(kv, newOnly, ""); c.mode != contract.ModeNative {
		t.Errorf("a pod selecting a new node: mode %q (%s), want native", c.mode, c.legacyReason)
	}
	oldToo := &corev1.Pod{Spec: corev1.PodSpec{Affinity: affinity(corev1.NodeSelectorOpIn, "old", "new")}}
	if c := chooseMode(kv, oldToo, ""); c.mode != contract.ModeLegacy || !strings.Contains(c.legacyReason, selected) ||
		!strings.Contains(c.legacyReason, "1.28.5") {
		t.Errorf("a pod whose affinity admits the old node: mode %q, reason %q; want legacy, naming the admitted node's kubelet", c.mode, c.legacyReason)
	}
	nowhere := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": "gpu"}}}
	if c := chooseMode(kv, nowhere, ""); c.mode != contract.ModeLegacy || !strings.Contains(c.legacyReason, anyNode) {
		t.Errorf("a pod whose selection admits no node yet: mode %q, reason %q; want legacy, over every node", c.mode, c.legacyReason)
	}
}

func TestKubeClusterVersionsKubeletErrors(t *testing.T) {
	t.Run("no nodes", func(t *testing.T) {
		kv := startVersions(t, fake.NewClientset(), &stubDiscovery{})
		if _, _, err := kv.MinKubeletVersion(onNode("")); !errors.Is(err, errNoNodes) {
			t.Errorf("err = %v, want errNoNodes", err)
		}
	})
	t.Run("unparseable kubelet version", func(t *testing.T) {
		kv := startVersions(t, fake.NewClientset(node("a", "v1.30.0"), node("weird", "")), &stubDiscovery{})
		if _, _, err := kv.MinKubeletVersion(onNode("")); err == nil {
			t.Error("a node with no kubelet version did not make the answer unknown")
		}
	})
	t.Run("not synced", func(t *testing.T) {
		kv := NewKubeClusterVersions(fake.NewClientset(node("a", "v1.30.0")), &stubDiscovery{}, time.Minute, nil)
		if kv.Ready() {
			t.Error("ready before Run")
		}
		if _, _, err := kv.MinKubeletVersion(onNode("")); err == nil {
			t.Error("answered before the cache synced")
		}
	})
}

func TestKubeClusterVersionsServer(t *testing.T) {
	disco := &stubDiscovery{info: apiversion.Info{Major: "1", Minor: "29", GitVersion: "v1.29.1"}}
	kv := NewKubeClusterVersions(fake.NewClientset(), disco, time.Minute, discardLogger())
	now := time.Unix(1000, 0)
	kv.now = func() time.Time { return now }

	get := func() string {
		t.Helper()
		v, err := kv.ServerVersion()
		if err != nil {
			t.Fatalf("ServerVersion: %v", err)
		}
		return v.String()
	}
	if got := get(); got != "1.29.1" {
		t.Fatalf("server = %s", got)
	}
	disco.set(apiversion.Info{Major: "1", Minor: "30", GitVersion: "v1.30.0"}, nil)
	now = now.Add(30 * time.Second)
	if got := get(); got != "1.29.1" {
		t.Errorf("within the refresh interval: %s, want the cached 1.29.1", got)
	}
	if disco.calls != 1 {
		t.Errorf("discovery called %d times, want 1 (cached)", disco.calls)
	}
	// idle: no refresh in flight, so the test may move the clock (the refresh reads it).
	idle := func() bool { kv.mu.Lock(); defer kv.mu.Unlock(); return kv.inflight == nil }
	now = now.Add(time.Minute)
	if got := get(); got != "1.29.1" {
		t.Errorf("the first call after the refresh interval: %s, want the cached 1.29.1 (refreshed in the background)", got)
	}
	waitFor(t, func() bool { return idle() && get() == "1.30.0" })

	// A failed refresh keeps the last good answer.
	disco.set(apiversion.Info{}, errors.New("apiserver unreachable"))
	now = now.Add(2 * time.Minute)
	if got := get(); got != "1.30.0" {
		t.Errorf("on a failed refresh: %s, want the stale 1.30.0", got)
	}
	waitFor(t, idle)
	if got := get(); got != "1.30.0" {
		t.Errorf("after a failed refresh: %s, want the stale 1.30.0", got)
	}

	// A non-semver GitVersion falls back to major and minor.
	disco.set(apiversion.Info{Major: "1", Minor: "31+", GitVersion: "custom-build"}, nil)
	now = now.Add(2 * time.Minute)
	get()
	waitFor(t, func() bool { return idle() && get() == "1.31" })
}

// Admissions never wait behind a slow discovery call once a version is known: 50 at once,
// while discovery hangs, all get the cached version, and only one call is made for all of
// them. Before anything is known they all wait for that one call.
func TestKubeClusterVersionsSlowDiscovery(t *testing.T) {
	const admissions = 50
	disco := &stubDiscovery{info: apiversion.Info{GitVersion: "v1.29.1"}, gate: make(chan struct{})}
	kv := NewKubeClusterVersions(fake.NewClientset(), disco, time.Minute, discardLogger())
	now := time.Unix(1000, 0)
	kv.now = func() time.Time { return now }
	// at calls ServerVersion from n goroutines and returns their answers.
	at := func(n int) <-chan string {
		answers := make(chan string, n)
		for range n {
			go func() {
				v, err := kv.ServerVersion()
				if err != nil {
					answers <- err.Error()
					return
				}
				answers <- v.String()
			}()
		}
		return answers
	}
	first := at(admissions)
	select {
	case a := <-first:
		t.Fatalf("answered %q before the first discovery call returned", a)
	case <-time.After(100 * time.Millisecond):
	}
	close(disco.gate)
	for range admissions {
		if a := <-first; a != "1.29.1" {
			t.Fatalf("first answers: %q, want 1.29.1", a)
		}
	}
	if disco.calls != 1 {
		t.Fatalf("%d discovery calls for %d waiting admissions, want 1", disco.calls, admissions)
	}

	hang := make(chan struct{})
	disco.mu.Lock()
	disco.gate, disco.info = hang, apiversion.Info{GitVersion: "v1.30.0"}
	disco.mu.Unlock()
	now = now.Add(2 * time.Minute)
	stale := at(admissions)
	for i := range admissions {
		select {
		case a := <-stale:
			if a != "1.29.1" {
				t.Fatalf("while refreshing: %q, want the cached 1.29.1", a)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d admissions waited behind the hanging discovery call", admissions-i, admissions)
		}
	}
	calls := func() int { disco.mu.Lock(); defer disco.mu.Unlock(); return disco.calls }
	waitFor(t, func() bool { return calls() >= 2 }) // the refresh runs in the background
	if n := calls(); n != 2 {
		t.Errorf("%d discovery calls, want 2 (one refresh for %d admissions)", n, admissions)
	}
	close(hang)
	waitFor(t, func() bool { v, _ := kv.ServerVersion(); return v.String() == "1.30.0" })
}

func TestKubeClusterVersionsServerErrorWithoutCache(t *testing.T) {
	disco := &stubDiscovery{err: errors.New("down")}
	kv := NewKubeClusterVersions(fake.NewClientset(), disco, time.Minute, discardLogger())
	now := time.Unix(1000, 0)
	kv.now = func() time.Time { return now }
	for i := 0; i < 5; i++ {
		if _, err := kv.ServerVersion(); err == nil {
			t.Fatal("no error although discovery failed and nothing was cached")
		}
	}
	if disco.calls != 1 {
		t.Errorf("discovery called %d times in a row while down, want 1 (the failure is remembered)", disco.calls)
	}
	disco.set(apiversion.Info{GitVersion: "v1.30.0"}, nil)
	now = now.Add(serverRetryInterval)
	if v, err := kv.ServerVersion(); err != nil || v.String() != "1.30.0" {
		t.Errorf("after the retry interval: %v, %v; want 1.30.0", v, err)
	}
}

// TestKubeClusterVersionsDrivesMode wires the client-go implementation into the mutator.
func TestKubeClusterVersionsDrivesMode(t *testing.T) {
	client := fake.NewClientset(node("new", "v1.30.2"), node("old", "v1.28.5"))
	kv := startVersions(t, client, &stubDiscovery{info: apiversion.Info{GitVersion: "v1.30.0"}})
	m := newMutator(t, kv)
	_, pod := mustAdmit(t, m, newPod())
	assertMode(t, pod, false)
	_, pod = mustAdmit(t, m, newPod(func(p *corev1.Pod) { p.Spec.NodeName = "new" }))
	assertMode(t, pod, true)
}
