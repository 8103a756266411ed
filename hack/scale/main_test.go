package main

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
)

func TestDistAndRows(t *testing.T) {
	d := distOf([]time.Duration{3 * time.Second, time.Second, 2 * time.Second})
	if d.n != 3 || !slices.Equal(d.q, []time.Duration{2 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second}) {
		t.Errorf("distOf = %+v", d)
	}
	if got := row("x", []time.Duration{1500 * time.Microsecond, 2 * time.Second}); got != "| x | 2 | 1.5 ms | 2.00 s | 2.00 s | 2.00 s |" {
		t.Errorf("row = %q", got)
	}
	if got := row("x", nil); got != "| x | 0 | | | | |" {
		t.Errorf("empty row = %q", got)
	}
	got := shareRow("share", []time.Duration{3 * time.Second, 4 * time.Second}, []time.Duration{time.Second, 2 * time.Second})
	if got != "| share | 2 / 2 | +2.00 s (x3.00) | +2.00 s (x2.00) | +2.00 s (x2.00) | +2.00 s (x2.00) |" {
		t.Errorf("shareRow = %q", got)
	}
	if got := shareRow("share", nil, []time.Duration{time.Second}); got != "| share | 0 / 1 | | | | |" {
		t.Errorf("shareRow without samples = %q", got)
	}
}

func TestFillCount(t *testing.T) {
	for _, tc := range []struct {
		allocatable int64
		active      int
		want        int
		err         bool
	}{
		{250, 4, 246, false}, // the local cluster: node plugin, 2 webhook replicas, emulator
		{250, 0, 250, false},
		{110, 109, 1, false},
		{250, 250, 0, true},
		{250, 260, 0, true},
		{0, 0, 0, true},
	} {
		got, err := fillCount(tc.allocatable, tc.active)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("fillCount(%d, %d) = %d, %v; want %d, error %v", tc.allocatable, tc.active, got, err, tc.want, tc.err)
		}
	}
	if twoVolumePods(246) != 123 || twoVolumePods(5) != 3 || twoVolumePods(1) != 1 {
		t.Errorf("twoVolumePods: 246 -> %d, 5 -> %d, 1 -> %d", twoVolumePods(246), twoVolumePods(5), twoVolumePods(1))
	}
	two := 0
	for i := range 5 {
		if volumesOf(i) == 2 {
			two++
		}
	}
	if two != twoVolumePods(5) {
		t.Errorf("volumesOf gives %d two-volume pods of 5, twoVolumePods %d", two, twoVolumePods(5))
	}
}

func TestActiveOn(t *testing.T) {
	pod := func(ns, name, node string, phase corev1.PodPhase) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	pods := []corev1.Pod{
		pod("gcsfuse-csi", "webhook-b", "n1", corev1.PodRunning),
		pod("gcsfuse-csi", "node-x", "n1", corev1.PodRunning),
		pod("gcsfuse-csi", "webhook-a", "n1", corev1.PodPending),
		pod("old", "done", "n1", corev1.PodSucceeded), // terminated pods take no slot
		pod("old", "failed", "n1", corev1.PodFailed),
		pod("other", "elsewhere", "n2", corev1.PodRunning),
		pod("other", "unscheduled", "", corev1.PodPending),
	}
	want := []string{"gcsfuse-csi/node-x", "gcsfuse-csi/webhook-a", "gcsfuse-csi/webhook-b"}
	if got := activeOn(pods, "n1"); !slices.Equal(got, want) {
		t.Errorf("activeOn = %v, want %v", got, want)
	}
}

func TestWaves(t *testing.T) {
	if got := waves(246, 25); len(got) != 10 || got[9] != (wave{225, 21}) || got[1] != (wave{25, 25}) {
		t.Errorf("waves(246, 25) = %v", got)
	}
	if got := waves(246, 0); !slices.Equal(got, []wave{{0, 246}}) {
		t.Errorf("waves(246, 0) = %v", got)
	}
	if got := waves(10, 25); !slices.Equal(got, []wave{{0, 10}}) {
		t.Errorf("waves(10, 25) = %v", got)
	}
	total := 0
	for _, w := range waves(101, 7) {
		if w.first != total {
			t.Fatalf("waves(101, 7): wave at %d, want %d", w.first, total)
		}
		total += w.count
	}
	if total != 101 {
		t.Errorf("waves(101, 7) cover %d pods", total)
	}
}

func TestParseMountinfo(t *testing.T) {
	in := `22 1 0:21 / /proc rw,nosuid shared:12 - proc proc rw
1401 29 0:95 / /var/lib/kubelet/pods/7f1c/volumes/kubernetes.io~csi/a/mount rw,nosuid,nodev,relatime shared:700 - fuse.gcsfuse scale-a-1 rw,user_id=65534,group_id=65534
1402 29 0:96 / /var/lib/kubelet/pods/7f1d/volumes/kubernetes.io~csi/b/mount rw,relatime - fuse.gcsfuse scale-b-2 rw
1403 29 0:97 / /var/lib/kubelet/pods/7f1d/volumes/kubernetes.io~empty-dir/gcsfuse-tmp rw,relatime shared:1 master:2 - tmpfs tmpfs rw
1404 29 0:98 / /mnt/with\040space rw - fuse.gcsfuse bkt rw
1405 29 0:99 / /var/lib/kubelet-other/pods/x/mount rw - fuse.gcsfuse bkt rw
`
	ms, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 6 || ms[0] != (mount{"/proc", "proc", "proc"}) || ms[4].point != "/mnt/with space" {
		t.Fatalf("parseMountinfo = %+v", ms)
	}
	got := driverMounts(ms, "/var/lib/kubelet")
	want := []mount{
		{"/var/lib/kubelet/pods/7f1c/volumes/kubernetes.io~csi/a/mount", "fuse.gcsfuse", "scale-a-1"},
		{"/var/lib/kubelet/pods/7f1d/volumes/kubernetes.io~csi/b/mount", "fuse.gcsfuse", "scale-b-2"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("driverMounts = %+v, want %+v", got, want)
	}
	if _, err := parseMountinfo(strings.NewReader("1 2 3 4\n")); err == nil {
		t.Error("a short line parsed")
	}
	if _, err := parseMountinfo(strings.NewReader("22 1 0:21 / /proc rw proc proc rw\n")); err == nil {
		t.Error("a line without the separator parsed")
	}
}

func TestFDsAndInotify(t *testing.T) {
	for in, want := range map[string]string{
		"socket:[123456]": "socket", "pipe:[99]": "pipe", "anon_inode:inotify": inotifyTarget,
		"anon_inode:[eventpoll]": "anon_inode:[eventpoll]", "/dev/fuse": "/dev/fuse",
	} {
		if got := fdKind(in); got != want {
			t.Errorf("fdKind(%q) = %q, want %q", in, got, want)
		}
	}
	ps := []proc{{pid: 1, uid: 0, inotify: 2}, {pid: 2, uid: 65534, inotify: 1}, {pid: 3, uid: 65534, inotify: 3}, {pid: 4, uid: 1000}}
	got := inotifyByUID(ps)
	if len(got) != 2 || got[0] != 2 || got[65534] != 4 {
		t.Errorf("inotifyByUID = %v", got)
	}
	status := []byte("Name:\tgcsfuse\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t0\t65534\t65534\t65534\nGid:\t0\t0\t0\t0\nVmRSS:\t  43008 kB\n")
	if uid, ok := effectiveUID(status); !ok || uid != 65534 {
		t.Errorf("effectiveUID = %d, %v; want 65534", uid, ok)
	}
	if _, ok := effectiveUID([]byte("Name:\tx\n")); ok {
		t.Error("effectiveUID without a Uid line")
	}
	if f := statusField(status, "VmRSS"); !slices.Equal(f, []string{"43008", "kB"}) {
		t.Errorf("statusField VmRSS = %q", f)
	}
}

func TestDiffLeaks(t *testing.T) {
	snap := func(items map[string][]string, counts map[string]int) snapshot {
		s := snapshot{counts: map[string]int{}, items: map[string][]string{}}
		for k, v := range items {
			for _, i := range v {
				s.add(k, i)
			}
		}
		for k, v := range counts {
			s.counts[k] = v
		}
		return s
	}
	before := snap(map[string][]string{
		leakMounts: nil, leakFDs: {"socket", "socket", "/dev/null"}, inotifyKind(0): {"kubelet", "containerd"},
		inotifyKind(65534): {"gcsfuse"},
	}, map[string]int{leakGoroutines: 40, leakPublished: 0})
	after := snap(map[string][]string{
		leakMounts: {"/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/a/mount (bucket b)"},
		leakFDs:    {"socket", "/dev/null", "/dev/fuse", "/dev/fuse"}, inotifyKind(0): {"containerd", "kubelet"},
		inotifyKind(1000): {"editor"},
	}, map[string]int{leakGoroutines: 44, leakPublished: 0})
	leaks := diffLeaks(before, after, tolerance)
	got := map[string]leak{}
	for _, l := range leaks {
		got[l.kind] = l
	}
	wantLeaked := map[string]bool{
		leakMounts: true, leakFDs: true, // 3 -> 4, two /dev/fuse more, one socket fewer
		leakGoroutines: false, // +4 within the tolerance
		leakPublished:  false, inotifyKind(0): false,
		inotifyKind(65534): false, // 1 -> 0: fewer is no leak
		inotifyKind(1000):  true,  // a uid only after
	}
	for k, want := range wantLeaked {
		l, ok := got[k]
		if !ok {
			t.Errorf("no comparison of %q", k)
			continue
		}
		if l.leaked() != want {
			t.Errorf("%s: leaked %v, want %v (%s)", k, l.leaked(), want, l)
		}
	}
	if len(leaks) != len(wantLeaked) {
		t.Errorf("%d comparisons, want %d", len(leaks), len(wantLeaked))
	}
	if l := got[leakFDs]; !slices.Equal(l.extra, []string{"/dev/fuse", "/dev/fuse"}) {
		t.Errorf("fd extra = %q", l.extra)
	}
	if l := got[inotifyKind(0)]; len(l.extra) != 0 {
		t.Errorf("same inotify owners in another order: extra %q", l.extra)
	}
	g := got[leakGoroutines]
	g.after = 46
	if !g.leaked() {
		t.Errorf("goroutines +6 with tolerance %d not a leak", goroutineTolerance)
	}
	if s := got[leakMounts].String(); !strings.Contains(s, "0 before, 1 after (+1)") || !strings.Contains(s, "(bucket b)") {
		t.Errorf("leak string %q", s)
	}
	var many leak
	many.kind = "x"
	for range maxLeakDetail + 3 {
		many.extra = append(many.extra, "item")
	}
	if s := many.String(); !strings.HasSuffix(s, "and 3 more") {
		t.Errorf("long leak string %q", s)
	}
}

func TestExtra(t *testing.T) {
	if got := extra([]string{"a", "b", "b"}, []string{"b", "c", "b", "b", "a"}); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("extra = %q", got)
	}
	if got := extra([]string{"a"}, nil); got != nil {
		t.Errorf("extra of nothing after = %q", got)
	}
}

func TestValidate(t *testing.T) {
	good := options{
		kubeconfig: "/k", gcsURL: "http://10.241.0.2:14443", kubeletRoot: "/var/lib/kubelet", workloadImage: "w",
		size: 65536, wave: 25, waveGap: 5 * time.Second, jobs: 1000, jobsParallel: 20, jobB: 4096,
		timeout: 20 * time.Minute, soakTimeout: 90 * time.Minute, settle: 2 * time.Minute, sharedPods: 50, sharedBytes: 8 << 20,
		prometheus: "/usr/bin/prometheus", netns: "/run/netns/gcsfuse-csi", promListen: "10.241.0.2:19091", scrapeConfig: "s.yaml",
	}
	if err := good.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mod := range map[string]func(*options){
		"-kubeconfig":        func(o *options) { o.kubeconfig = "" },
		"-n":                 func(o *options) { o.n = -1 },
		"-n ":                func(o *options) { o.n = maxPodsPerRun + 1 },
		"-bytes":             func(o *options) { o.size = 0 },
		"-wave":              func(o *options) { o.wave = -1 },
		"-wave-gap":          func(o *options) { o.waveGap = time.Hour },
		"-jobs":              func(o *options) { o.jobs = -1 },
		"-jobs-parallel":     func(o *options) { o.jobsParallel = 0 },
		"-job-bytes":         func(o *options) { o.jobB = maxBytes + 1 },
		"-timeout":           func(o *options) { o.timeout = time.Second },
		"-soak-timeout":      func(o *options) { o.soakTimeout = 7 * time.Hour },
		"-settle":            func(o *options) { o.settle = -time.Second },
		"-shared-pods":       func(o *options) { o.sharedPods = 1 },
		"-shared-bytes":      func(o *options) { o.sharedBytes = 0 },
		"-kubelet-root":      func(o *options) { o.kubeletRoot = "var/lib/kubelet" },
		"-gcs-url":           func(o *options) { o.gcsURL = "https://storage.googleapis.com/storage/v1" },
		"-prometheus":        func(o *options) { o.prometheus = "" },
		"-prometheus-listen": func(o *options) { o.promListen = "10.241.0.2" },
	} {
		o := good
		mod(&o)
		err := o.validate()
		if err == nil || !strings.Contains(err.Error(), strings.TrimSpace(name)) {
			t.Errorf("%s: error %v", name, err)
		}
	}
	o := good
	o.n, o.wave, o.jobs, o.settle, o.sharedPods = 0, 0, 0, 0, 0 // fill, no waves, no soak, no settling, no shared phase
	if err := o.validate(); err != nil {
		t.Errorf("zeros: %v", err)
	}
}

func TestJobOutcome(t *testing.T) {
	job := func(cs ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{Status: batchv1.JobStatus{Conditions: cs}}
	}
	cond := func(t batchv1.JobConditionType, s corev1.ConditionStatus) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: s, Reason: "R", Message: "m"}
	}
	for name, tc := range map[string]struct {
		j           *batchv1.Job
		done, ok    bool
		whyNonEmpty bool
	}{
		"running":           {job(), false, false, false},
		"success criteria":  {job(cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue)), false, false, false},
		"complete":          {job(cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue), cond(batchv1.JobComplete, corev1.ConditionTrue)), true, true, false},
		"failed":            {job(cond(batchv1.JobFailed, corev1.ConditionTrue)), true, false, true},
		"complete, not yet": {job(cond(batchv1.JobComplete, corev1.ConditionFalse)), false, false, false},
	} {
		done, ok, why := jobOutcome(tc.j)
		if done != tc.done || ok != tc.ok || (why != "") != tc.whyNonEmpty {
			t.Errorf("%s: %v %v %q", name, done, ok, why)
		}
	}
	w := &jobWaiters{m: map[string]chan jobEnd{}}
	c := w.add("job-0001")
	w.see(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job-0001"}})
	w.see(&corev1.Pod{})
	select {
	case e := <-c:
		t.Fatalf("end of a running Job: %+v", e)
	default:
	}
	done := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job-0001"}, Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{cond(batchv1.JobComplete, corev1.ConditionTrue)}}}
	w.see(done)
	w.see(done) // a relist sees it again: no second send, no block
	if e := <-c; !e.ok {
		t.Errorf("end %+v", e)
	}
	if len(w.m) != 0 {
		t.Errorf("waiters left: %v", w.m)
	}
}

func TestPodState(t *testing.T) {
	st := newPodState("r")
	ours := map[string]string{runLabel: "r"}
	st.see(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: ours}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	st.see(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: ours}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}})
	st.see(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: map[string]string{runLabel: "other"}}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}})
	st.see(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: ours}, Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfpods",
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}}}})
	if st.count() != 2 {
		t.Errorf("terminal %d, want 2", st.count())
	}
	if why := st.failed["b"]; !strings.Contains(why, "OutOfpods") || !strings.Contains(why, "container app exited 1 (Error)") {
		t.Errorf("failure of b: %q", why)
	}
	if _, failed := st.failed["a"]; failed {
		t.Error("a succeeded but is failed")
	}
}

func TestParseMoments(t *testing.T) {
	start, exit, err := parseMoments([]byte("START 1700000000123\nwrote x 65536 bytes in 4ms\nEXIT 1700000000456 0\n"))
	if err != nil || start.UnixMilli() != 1700000000123 || exit.UnixMilli() != 1700000000456 {
		t.Errorf("parseMoments = %v %v %v", start, exit, err)
	}
	if _, _, err := parseMoments([]byte("START 1\n")); err == nil {
		t.Error("no EXIT line parsed")
	}
}

func TestLogFigures(t *testing.T) {
	since := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	lines := []string{
		`time=2026-12-05T10:00:01.000Z level=DEBUG msg="csi call" method=/csi.v1.Node/NodePublishVolume code=OK ms=3 err=<nil>`,
		`time=2026-12-05T09:59:59.000Z level=DEBUG msg="csi call" method=/csi.v1.Node/NodePublishVolume code=OK ms=99 err=<nil>`,
		`time=2026-12-05T10:00:01.000Z level=INFO msg="volume mounted; descriptor offered to sidecar" podUID=u1 volume=a readOnly=false`,
		`time=2026-12-05T10:00:03.500Z level=INFO msg="gcsfuse serving" podUID=u1 volume=a state=started ms=120`,
		`time=2026-12-05T10:00:04.000Z level=INFO msg="gcsfuse serving" podUID=u2 volume=a state=started ms=80`,
		`{"time":"2026-12-05T10:00:02.5Z","level":"DEBUG","msg":"admission served","uid":"x","allowed":true,"us":1234}`,
		`{"time":"2026-12-05T09:00:02.5Z","level":"DEBUG","msg":"admission served","uid":"y","allowed":true,"us":9}`,
	}
	for _, l := range lines {
		if !relevantLine(l) {
			t.Errorf("not relevant: %s", l)
		}
	}
	if relevantLine(`time=2026-12-05T10:00:01.000Z level=DEBUG msg="csi call" method=/csi.v1.Node/NodeGetCapabilities code=OK ms=0`) {
		t.Error("NodeGetCapabilities is relevant")
	}
	if got := publishLatencies(lines, since); !slices.Equal(got, []time.Duration{3 * time.Millisecond}) {
		t.Errorf("publish = %v", got)
	}
	all, sidecar := readyLatencies(lines, since)
	if !slices.Equal(all, []time.Duration{2500 * time.Millisecond}) || !slices.Equal(sidecar, []time.Duration{120 * time.Millisecond}) {
		t.Errorf("ready = %v, %v", all, sidecar)
	}
	if got := admissionLatencies(lines, since); !slices.Equal(got, []time.Duration{1234 * time.Microsecond}) {
		t.Errorf("admission = %v", got)
	}
}

func TestPatternMD5(t *testing.T) {
	for _, size := range []int{1, 251, 64 << 10, 64<<10 + 7, 200000} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i % 251)
		}
		sum := md5.Sum(b)
		if got, want := patternMD5(size), base64.StdEncoding.EncodeToString(sum[:]); got != want {
			t.Errorf("patternMD5(%d) = %s, want %s", size, got, want)
		}
	}
}

func TestWorkloadSpec(t *testing.T) {
	s := &scale{opts: options{workloadImage: "img", size: 10}, buckets: []string{"ba", "bb"}, ns: "ns"}
	two := s.pod("burst-vol", "burst-vol-000", 0, true)
	one := s.pod("burst-vol", "burst-vol-001", 1, true)
	twin := s.pod("burst-twin", "burst-twin-000", 0, false)
	if len(two.Spec.Volumes) != 2 || two.Spec.Volumes[1].CSI == nil || two.Spec.Volumes[1].CSI.VolumeAttributes["bucketName"] != "bb" ||
		!slices.Contains(two.Spec.Containers[0].Args, "-also") {
		t.Errorf("two-volume pod: %+v", two.Spec)
	}
	if len(one.Spec.Volumes) != 1 || slices.Contains(one.Spec.Containers[0].Args, "-also") {
		t.Errorf("one-volume pod: %+v", one.Spec)
	}
	if len(twin.Spec.Volumes) != 2 || twin.Spec.Volumes[0].EmptyDir == nil || twin.Annotations != nil {
		t.Errorf("twin pod: %+v %v", twin.Spec, twin.Annotations)
	}
	if two.Labels[runLabel] != "burst-vol" || two.Annotations["gcsfuse.csi.storage/ephemeral-storage-request"] != "0" {
		t.Errorf("labels %v annotations %v", two.Labels, two.Annotations)
	}
	j := s.job("job-0007")
	if *j.Spec.BackoffLimit != 0 || j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || len(j.Spec.Template.Spec.Volumes) != 1 ||
		j.Spec.Template.Labels[runLabel] != jobRun || !slices.Contains(j.Spec.Template.Spec.Containers[0].Args, "job-0007.bin") {
		t.Errorf("job: %+v", j.Spec)
	}
}

// TestRunJob runs the soak's plumbing against a fake API server: the Job watch (follow)
// hands the Complete condition to the worker waiting for that Job, which then deletes it.
func TestRunJob(t *testing.T) {
	cs := fake.NewClientset()
	s := &scale{cs: cs, ns: "ns", opts: options{workloadImage: "img", jobB: 10, soakTimeout: time.Minute}, buckets: []string{"a", "b"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waiters := &jobWaiters{m: map[string]chan jobEnd{}}
	wctx, stop := context.WithCancel(ctx)
	followed := make(chan struct{})
	l, watching := signalWatch(s.jobLister(runLabel + "=" + jobRun))
	go func() {
		defer close(followed)
		follow(wctx, l, waiters.see)
	}()
	<-watching
	// The Job controller: completes job-0000 and fails job-0001 once created.
	go func() {
		for ctx.Err() == nil {
			for name, typ := range map[string]batchv1.JobConditionType{"job-0000": batchv1.JobComplete, "job-0001": batchv1.JobFailed} {
				j, err := cs.BatchV1().Jobs("ns").Get(ctx, name, metav1.GetOptions{})
				if err != nil || len(j.Status.Conditions) > 0 {
					continue
				}
				j.Status.Conditions = []batchv1.JobCondition{{Type: typ, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"}}
				_, _ = cs.BatchV1().Jobs("ns").UpdateStatus(ctx, j, metav1.UpdateOptions{})
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	took, err := s.runJob(ctx, waiters, "job-0000")
	if err != nil || took <= 0 {
		t.Errorf("job-0000: %v, %v", took, err)
	}
	if _, err := s.runJob(ctx, waiters, "job-0001"); err == nil || !strings.Contains(err.Error(), "BackoffLimitExceeded") {
		t.Errorf("job-0001: %v", err)
	}
	if l, err := cs.BatchV1().Jobs("ns").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("Jobs left: %v %v", l, err)
	}
	stop()
	<-followed
	cancel()
}

// TestFollowPods: the pod watch sees pods created after the list and their terminal phase.
func TestFollowPods(t *testing.T) {
	cs := fake.NewClientset()
	s := &scale{cs: cs, ns: "ns"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := newPodState("r")
	wctx, stop := context.WithCancel(ctx)
	followed := make(chan struct{})
	l, watching := signalWatch(s.podLister(runLabel + "=r"))
	go func() {
		defer close(followed)
		follow(wctx, l, st.see)
	}()
	<-watching
	for i, phase := range []corev1.PodPhase{corev1.PodSucceeded, corev1.PodFailed, corev1.PodRunning} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p" + strconv.Itoa(i), Namespace: "ns", Labels: map[string]string{runLabel: "r"}}}
		if _, err := cs.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = phase
		if _, err := cs.CoreV1().Pods("ns").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns", Labels: map[string]string{runLabel: "x"}}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	if _, err := cs.CoreV1().Pods("ns").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for st.count() < 2 {
		select {
		case <-st.changed:
		case <-ctx.Done():
			t.Fatalf("terminal pods seen: %d", st.count())
		}
	}
	stop()
	<-followed
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.terminal["other"]; ok || len(st.terminal) != 2 || st.failed["p1"] == "" {
		t.Errorf("terminal %v failed %v", st.terminal, st.failed)
	}
}

// signalWatch wraps l so that the channel closes once its first watch is established: the
// fake clientset's watch, unlike the API server's, does not start at the list's version, so
// an object written between the list and the watch would never be seen.
func signalWatch(l lister) (lister, chan struct{}) {
	watching := make(chan struct{})
	var once sync.Once
	inner := l.watch
	l.watch = func(ctx context.Context, rv string) (watch.Interface, error) {
		w, err := inner(ctx, rv)
		once.Do(func() { close(watching) })
		return w, err
	}
	return l, watching
}

// The 99th percentile in a histogram's +Inf bucket (a text exposition lists it) is printed
// as above the last finite bound, never as a duration overflowed from +Inf.
func TestHistogramP99AboveTheLastBucket(t *testing.T) {
	hist := func(counts ...uint64) map[string]*dto.MetricFamily {
		bounds := []float64{1, 60, math.Inf(1)}
		h := &dto.Histogram{}
		for i, c := range counts {
			h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(bounds[i]), CumulativeCount: proto.Uint64(c)})
		}
		return map[string]*dto.MetricFamily{"h": {Name: proto.String("h"), Metric: []*dto.Metric{{Histogram: h}}}}
	}
	if got := histogramP99(nil, hist(1, 10, 100), "h", nil); got != "> 1m0s (n=100)" {
		t.Errorf("p99 in +Inf: %q, want > 1m0s (n=100)", got)
	}
	if got := histogramP99(nil, hist(99, 100, 100), "h", nil); got != "<= 1s (n=100)" {
		t.Errorf("p99 in the first bucket: %q", got)
	}
}

// The README's block of a run: the setting, the tables as printed, the verdict; a failed
// run says so instead of the all-clear.
func TestMarkdownBlock(t *testing.T) {
	var tables strings.Builder
	printLeaks(&tables, []leak{{kind: "sidecar processes", before: 0, after: 1, allowed: 0}}, 3*time.Second)
	rep := &report{setting: "maxPods 250, 4 pods already on it -> 246 pods per run", tables: tables.String()}
	b, err := markdownBlock(rep)
	if err != nil {
		t.Fatal(err)
	}
	want := "<!-- BEGIN GENERATED: scale (by SCALE_MARKDOWN=FILE hack/scale.sh) -->\n\n" +
		"maxPods 250, 4 pods already on it -> 246 pods per run.\n\n" +
		"| leak: the node before the first pod and after the last one was gone (settled 3s) | before | after | growth | allowed |\n" +
		"|---|---|---|---|---|\n" +
		"| sidecar processes | 0 | 1 | +1 | 0 |\n\n" +
		"scale: every pod and Job succeeded with its bytes; nothing leaked\n\n" +
		"<!-- END GENERATED: scale -->\n"
	if got := b.Format(); got != want {
		t.Errorf("block:\n%s\nwant:\n%s", got, want)
	}
	rep.leaks = []string{"sidecar processes: 0 -> 1"}
	if b, err := markdownBlock(rep); err != nil || !strings.Contains(b.Body, "scale: FAILED: 1 leaks, 0 losses") || strings.Contains(b.Body, "nothing leaked") {
		t.Errorf("failed run's block: %q, %v", b.Body, err)
	}
}
