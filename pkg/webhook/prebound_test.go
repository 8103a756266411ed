package webhook

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"
	k8stesting "k8s.io/client-go/testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// unboundClaim is a claim in namespace ns with uid, of class (nil: the field is absent),
// that names no volume.
func unboundClaim(name, uid string, class *string) *corev1.PersistentVolumeClaim {
	c := pendingClaim(name, class)
	c.UID = types.UID(uid)
	return c
}

// preboundPV is a PersistentVolume of the CSI driver (nil driver: an NFS volume) whose
// claimRef names ns/claim, with uid when not empty.
func preboundPV(name, driver, claim, uid string, attrs map[string]string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "ns", Name: claim, UID: types.UID(uid)},
	}}
	if driver == "" {
		pv.Spec.NFS = &corev1.NFSVolumeSource{Server: "s", Path: "/"}
	} else {
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "bucket", VolumeAttributes: attrs}
	}
	return pv
}

// fileCache are volume attributes that ask for a file cache.
var fileCache = map[string]string{contract.AttrFileCacheCapacity: "1Gi"}

// preboundCluster is a cluster of claims that name no volume and of the volumes whose
// claimRef names them: of the driver (pre, of a class that does not exist; uid-match, the
// claimRef with the claim's UID), of another driver (theirs, of a class of the driver's),
// not CSI (nfs), a volume released by an earlier claim of the name (uid-mismatch, the
// claimRef with another UID), one being deleted (deleting), one in another namespace
// (elsewhere), two of different drivers (ambiguous). named names a volume that does not
// exist yet, while another names it in its claimRef: the claim waits for its own.
func preboundCluster() []runtime.Object {
	deleting := preboundPV("pv-deleting", contract.DriverName, "deleting", "", nil)
	deleting.DeletionTimestamp = &metav1.Time{}
	deleting.Finalizers = []string{"kubernetes.io/pv-protection"}
	elsewhere := preboundPV("pv-elsewhere", contract.DriverName, "elsewhere", "", nil)
	elsewhere.Spec.ClaimRef.Namespace = "other"
	named := unboundClaim("named", "u-named", ptr(""))
	named.Spec.VolumeName = "pv-later"
	return []runtime.Object{
		storageClass("gcs", contract.DriverName, gcsParams, false, 100),
		unboundClaim("pre", "u-pre", ptr("nosuch")),
		preboundPV("pv-pre", contract.DriverName, "pre", "", fileCache),
		unboundClaim("uid-match", "u-match", ptr("")),
		preboundPV("pv-uid-match", contract.DriverName, "uid-match", "u-match", fileCache),
		unboundClaim("theirs", "u-theirs", ptr("gcs")),
		preboundPV("pv-theirs", "ebs.csi.aws.com", "theirs", "", fileCache),
		unboundClaim("nfs", "u-nfs", ptr("gcs")),
		preboundPV("pv-nfs", "", "nfs", "", nil),
		unboundClaim("uid-mismatch", "u-new", ptr("")),
		preboundPV("pv-released", contract.DriverName, "uid-mismatch", "u-old", fileCache),
		unboundClaim("deleting", "u-deleting", ptr("")),
		deleting,
		unboundClaim("elsewhere", "u-elsewhere", ptr("")),
		elsewhere,
		unboundClaim("ambiguous", "u-ambiguous", ptr("")),
		preboundPV("pv-ambiguous-a", contract.DriverName, "ambiguous", "", nil),
		preboundPV("pv-ambiguous-b", "ebs.csi.aws.com", "ambiguous", "", nil),
		named,
		preboundPV("pv-named-too", contract.DriverName, "named", "", nil),
	}
}

// startPrebound runs a PreboundVolumes until the test ends and waits for its cache.
func startPrebound(t *testing.T, client *fake.Clientset) *PreboundVolumes {
	t.Helper()
	p := NewPreboundVolumes(client)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, p.Ready)
	return p
}

// A claim that names no volume resolves to the PersistentVolume whose claimRef names it
// (its UID too, when the claimRef has one), whatever its class, as the PV controller binds
// them; without one, or before the cache has synced, it is pending as before. A claim that
// names a volume is resolved through that name alone.
func TestKubeVolumeClaimsPrebound(t *testing.T) {
	cs := fake.NewClientset(preboundCluster()...)
	k := KubeVolumeClaims{Client: cs, Prebound: startPrebound(t, cs)}
	for _, tt := range []struct {
		claim   string
		want    ClaimedVolume
		wantErr string
	}{
		{claim: "pre", want: ClaimedVolume{Bound: true, Driver: contract.DriverName, Attributes: fileCache}},
		{claim: "uid-match", want: ClaimedVolume{Bound: true, Driver: contract.DriverName, Attributes: fileCache}},
		{claim: "theirs", want: ClaimedVolume{Bound: true, Driver: "ebs.csi.aws.com", Attributes: fileCache}},
		{claim: "nfs", want: ClaimedVolume{Bound: true}},
		{claim: "uid-mismatch", want: ClaimedVolume{Pending: true, StorageClassName: ptr("")}},
		{claim: "deleting", want: ClaimedVolume{Pending: true, StorageClassName: ptr("")}},
		{claim: "elsewhere", want: ClaimedVolume{Pending: true, StorageClassName: ptr("")}},
		{claim: "ambiguous", wantErr: "claim ns/ambiguous: PersistentVolumes pv-ambiguous-a (driver gcsfuse.csi.storage) and pv-ambiguous-b (driver ebs.csi.aws.com) both name it in their claimRef"},
		{claim: "named", want: ClaimedVolume{}},
		{claim: "nosuch", want: ClaimedVolume{}},
	} {
		got, err := k.ClaimVolume(context.Background(), "ns", tt.claim)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ClaimVolume(%s) = %+v, %v; want error %q", tt.claim, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ClaimVolume(%s) = %+v, %v; want %+v", tt.claim, got, err, tt.want)
		}
	}
	// A claim that names no volume costs its GET and no other call: the volumes come from
	// the cache.
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "persistentvolumes" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			if g, ok := a.(interface{ GetName() string }); !ok || g.GetName() != "pv-later" {
				t.Errorf("a PersistentVolume call beside the cache's list and watch: %s %v", a.GetVerb(), a)
			}
		}
	}
}

// Until its cache has synced PreboundVolumes finds nothing, even what its indexer holds: a
// claim is resolved as it was without it.
func TestKubeVolumeClaimsPreboundNotSynced(t *testing.T) {
	cs := fake.NewClientset(preboundCluster()...)
	p := NewPreboundVolumes(cs)
	if p.Ready() {
		t.Fatal("ready before Run")
	}
	if err := p.indexer.Add(preboundPV("pv-pre", contract.DriverName, "pre", "", fileCache)); err != nil {
		t.Fatal(err)
	}
	k := KubeVolumeClaims{Client: cs, Prebound: p}
	want := ClaimedVolume{Pending: true, StorageClassName: ptr("nosuch"), MaybeStale: true}
	if got, err := k.ClaimVolume(context.Background(), "ns", "pre"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("not synced: ClaimVolume(pre) = %+v, %v; want %+v", got, err, want)
	}
	if got, err := (KubeVolumeClaims{Client: cs}).ClaimVolume(context.Background(), "ns", "pre"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("no PreboundVolumes: ClaimVolume(pre) = %+v, %v; want %+v", got, err, want)
	}
	p.synced = func() bool { return true } // what the indexer holds is found once synced
	if got, err := k.ClaimVolume(context.Background(), "ns", "pre"); err != nil || !got.Bound || got.Driver != contract.DriverName {
		t.Errorf("synced: ClaimVolume(pre) = %+v, %v; want the driver's volume", got, err)
	}
}

// The cache follows the cluster (a volume made after the claim, the shape of one apply, is
// found once its watch event has arrived) and keeps only what it reads of a volume.
func TestPreboundVolumesCache(t *testing.T) {
	cs := fake.NewClientset(unboundClaim("later", "u-later", ptr("")),
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "free", Labels: map[string]string{"a": "b"}},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: contract.DriverName, VolumeHandle: "bucket"}}}})
	p := startPrebound(t, cs)
	k := KubeVolumeClaims{Client: cs, Prebound: p}
	if got, err := k.ClaimVolume(context.Background(), "ns", "later"); err != nil || !got.Pending {
		t.Fatalf("before its volume: ClaimVolume(later) = %+v, %v; want pending", got, err)
	}
	pv := preboundPV("pv-later", contract.DriverName, "later", "", fileCache)
	pv.Labels = map[string]string{"a": "b"}
	pv.Spec.MountOptions = []string{"implicit-dirs"}
	if _, err := cs.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		got, err := k.ClaimVolume(context.Background(), "ns", "later")
		return err == nil && got.Bound && got.Driver == contract.DriverName && reflect.DeepEqual(got.Attributes, fileCache)
	})

	obj, ok, err := p.indexer.GetByKey("pv-later")
	if err != nil || !ok {
		t.Fatalf("pv-later not cached: %v", err)
	}
	// Its mountOptions stay: they may ask for the file cache (mountopts.WantsFileCache).
	want := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-later"}, Spec: corev1.PersistentVolumeSpec{
		ClaimRef:               &corev1.ObjectReference{Namespace: "ns", Name: "later"},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: contract.DriverName, VolumeAttributes: fileCache}},
		MountOptions:           []string{"implicit-dirs"},
	}}
	got := obj.(*corev1.PersistentVolume).DeepCopy()
	got.ResourceVersion = ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cached volume not trimmed: %+v, want %+v", got, want)
	}
	obj, ok, err = p.indexer.GetByKey("free")
	if err != nil || !ok {
		t.Fatalf("free not cached: %v", err)
	}
	if free := obj.(*corev1.PersistentVolume); len(free.Labels) > 0 || free.Spec.CSI != nil {
		t.Errorf("a volume without claimRef cached with more than its name: %+v", free)
	}
}

// At admission, a pod whose claim a PersistentVolume of the driver is pre-bound to gets the
// sidecar, the volume's attributes deciding the file cache; one of another driver's is not
// ours, without a warning; a claimRef of another claim's UID, or a cache not synced yet,
// leaves the claim to its class, as before.
func TestPreboundClaimsInjected(t *testing.T) {
	noAnnotation := func(vols ...corev1.Volume) *corev1.Pod {
		return newPod(func(p *corev1.Pod) {
			delete(p.Annotations, contract.AnnotationInject)
			p.Spec.Volumes = vols
		})
	}
	for _, tt := range []struct {
		name        string
		notSynced   bool
		pod         *corev1.Pod
		inject      bool
		wantWarning string
	}{
		{name: "pre-bound to the driver's volume, of a class that does not exist", pod: noAnnotation(claimVolume("data", "pre")), inject: true},
		{name: "pre-bound with the claim's UID", pod: noAnnotation(claimVolume("data", "uid-match")), inject: true},
		{name: "pre-bound to another driver's volume, of the driver's class", pod: noAnnotation(claimVolume("data", "theirs"))},
		{name: "pre-bound to a volume that is not CSI", pod: noAnnotation(claimVolume("data", "nfs"))},
		{name: "claimRef of another UID", pod: noAnnotation(claimVolume("data", "uid-mismatch")), wantWarning: "claim uid-mismatch is not bound"},
		{name: "pre-bound by two volumes of different drivers", pod: noAnnotation(claimVolume("data", "ambiguous")),
			wantWarning: "volume data: cannot tell whether claim ambiguous is a gcsfuse.csi.storage volume (claim ns/ambiguous: PersistentVolumes pv-ambiguous-a"},
		{name: "naming a volume that does not exist yet", pod: noAnnotation(claimVolume("data", "named")), wantWarning: "claim named is not bound"},
		// The cache behind the API server (a volume created a moment before the pod): a
		// claim whose class does not tell is looked up live, and found.
		{name: "cache behind, of a class that does not exist", notSynced: true, pod: noAnnotation(claimVolume("data", "pre")), inject: true},
		{name: "cache behind, of no class", notSynced: true, pod: noAnnotation(claimVolume("data", "uid-match")), inject: true},
		{name: "cache behind, claimRef of another UID", notSynced: true, pod: noAnnotation(claimVolume("data", "uid-mismatch")), wantWarning: "claim uid-mismatch is not bound"},
		{name: "cache behind, a volume being deleted", notSynced: true, pod: noAnnotation(claimVolume("data", "deleting")), wantWarning: "claim deleting is not bound"},
		{name: "cache behind, a claimRef in another namespace", notSynced: true, pod: noAnnotation(claimVolume("data", "elsewhere")), wantWarning: "claim elsewhere is not bound"},
		{name: "cache not synced, of the driver's class", notSynced: true, pod: noAnnotation(claimVolume("data", "theirs")), inject: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(preboundCluster()...)
			cfg := testConfig()
			if tt.notSynced {
				cfg.Claims = KubeVolumeClaims{Client: cs, Prebound: NewPreboundVolumes(cs)}
			} else {
				cfg.Claims = KubeVolumeClaims{Client: cs, Prebound: startPrebound(t, cs)}
			}
			m, err := NewMutator(cfg, modern, discardLogger())
			if err != nil {
				t.Fatal(err)
			}
			checkCachedInjection(t, m, tt.pod, tt.inject, tt.wantWarning)
		})
	}
}

// oldAndFreshClaims is a clientset with two pending claims of no class in ns: "old", an
// hour old at start, and "fresh", 5 s old.
func oldAndFreshClaims() (start time.Time, cs *fake.Clientset) {
	old, fresh := unboundClaim("old", "u-old", ptr("")), unboundClaim("fresh", "u-fresh", ptr(""))
	start = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	old.CreationTimestamp = metav1.NewTime(start.Add(-time.Hour))
	fresh.CreationTimestamp = metav1.NewTime(start.Add(-5 * time.Second))
	return start, fake.NewClientset(old, fresh)
}

// The live list of every PersistentVolume is for a claim whose volume may not have reached
// the cache yet: the cache not synced, or the claim seconds old. A pending claim older than
// that (every local-PV StatefulSet's pod: another driver's class that provisions nothing)
// costs no list at all, a live one is read from the API server's watch cache
// (resourceVersion 0), and the limiter bounds them across admissions.
func TestPreboundLiveOnlyWhenWorthIt(t *testing.T) {
	start, cs := oldAndFreshClaims()
	lists := func() (n int, rvs []string) {
		for _, a := range cs.Actions() {
			if l, ok := a.(k8stesting.ListActionImpl); ok && a.GetResource().Resource == "persistentvolumes" {
				n++
				rvs = append(rvs, l.ListOptions.ResourceVersion)
			}
		}
		return n, rvs
	}
	p := startPrebound(t, cs)
	base, _ := lists() // the cache's own list
	k := KubeVolumeClaims{Client: cs, Prebound: p, now: func() time.Time { return start }}
	if got, err := k.PreboundLive(context.Background(), "ns", "old"); err != nil || !got.Pending {
		t.Fatalf("PreboundLive(old) = %+v, %v; want pending", got, err)
	}
	if n, _ := lists(); n != base {
		t.Fatalf("%d live lists for a claim an hour old with the cache synced, want none", n-base)
	}
	if _, err := k.PreboundLive(context.Background(), "ns", "fresh"); err != nil {
		t.Fatal(err)
	}
	n, rvs := lists()
	if n != base+1 || rvs[len(rvs)-1] != "0" {
		t.Fatalf("lists %d (resourceVersions %q) after a claim 5 s old, want one more, from the watch cache (\"0\")", n-base, rvs)
	}
	k.Live = rate.NewLimiter(rate.Every(time.Hour), 1)
	for range 3 {
		if _, err := k.PreboundLive(context.Background(), "ns", "fresh"); err != nil {
			t.Fatal(err)
		}
	}
	if n2, _ := lists(); n2 != n+1 {
		t.Fatalf("%d live lists with a limiter of one, want 1", n2-n)
	}
	// Before the cache has synced, any pending claim goes live.
	unsynced := KubeVolumeClaims{Client: cs, Prebound: NewPreboundVolumes(cs), now: func() time.Time { return start }}
	if _, err := unsynced.PreboundLive(context.Background(), "ns", "old"); err != nil {
		t.Fatal(err)
	}
	if n3, _ := lists(); n3 != n+2 {
		t.Fatalf("no live list for a claim while the cache has not synced")
	}
}

// The live list pages as the API server does (limit and continue): a volume pre-bound to
// the claim on the third page of 500 is found, in three calls, and a cluster of more volumes
// than the pages allow is an error, never a claim silently left pending.
func TestPreboundLivePages(t *testing.T) {
	claim := unboundClaim("paged", "u-paged", ptr(""))
	cs := fake.NewClientset(claim)
	var pvs []corev1.PersistentVolume
	for i := range 1200 {
		pv := preboundPV(fmt.Sprintf("pv-%04d", i), "other.csi", fmt.Sprintf("claim-%d", i), "", nil)
		if i == 1100 {
			pv = preboundPV("pv-1100", contract.DriverName, "paged", "", fileCache)
		}
		pvs = append(pvs, *pv)
	}
	calls := 0
	pager := func(total []corev1.PersistentVolume) k8stesting.ReactionFunc {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			opts := a.(k8stesting.ListActionImpl).ListOptions
			calls++
			from := 0
			if opts.Continue != "" {
				from, _ = strconv.Atoi(opts.Continue)
			}
			to := min(from+int(opts.Limit), len(total))
			list := &corev1.PersistentVolumeList{Items: total[from:to]}
			if to < len(total) {
				list.Continue = strconv.Itoa(to)
			}
			return true, list, nil
		}
	}
	cs.PrependReactor("list", "persistentvolumes", pager(pvs))
	k := KubeVolumeClaims{Client: cs}
	got, err := k.PreboundLive(context.Background(), "ns", "paged")
	if err != nil || !got.Bound || got.Driver != contract.DriverName {
		t.Fatalf("PreboundLive(paged) = %+v, %v; want the driver's volume on the third page", got, err)
	}
	if calls != 3 {
		t.Fatalf("%d list calls for 1,200 volumes in pages of %d, want 3", calls, livePreboundPageSize)
	}
	many := make([]corev1.PersistentVolume, livePreboundPages*livePreboundPageSize+1)
	for i := range many {
		many[i] = *preboundPV(fmt.Sprintf("pv-m%05d", i), "other.csi", "x", "", nil)
	}
	cs2 := fake.NewClientset(claim)
	cs2.PrependReactor("list", "persistentvolumes", pager(many))
	if _, err := (KubeVolumeClaims{Client: cs2}).PreboundLive(context.Background(), "ns", "paged"); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a cluster of %d volumes: %v, want an error", len(many), err)
	}
}

// classOnly answers ClassVolume from a table (nil: the default class), and nothing else.
type classOnly struct {
	def, none ClassedVolume
	asked     []string
}

func (c *classOnly) ClaimVolume(context.Context, string, string) (ClaimedVolume, error) {
	return ClaimedVolume{}, nil
}

func (c *classOnly) ClassVolume(_ context.Context, className *string) (ClassedVolume, error) {
	if className == nil {
		c.asked = append(c.asked, "default")
		return c.def, nil
	}
	c.asked = append(c.asked, "class "+*className)
	return c.none, nil
}

// One admission looks each class up once, and "the default class" (no storageClassName)
// and "no class" (storageClassName "") are two look-ups with two answers: a default class
// of the driver's must not make a no-class claim the driver's, nor the other way round.
func TestClassLookupsKeepDefaultAndNoClassApart(t *testing.T) {
	c := &classOnly{def: ClassedVolume{Class: "gcs", Provisioner: contract.DriverName, Parameters: map[string]string{}}}
	l := &classLookups{claims: c, driver: contract.DriverName, done: map[string]classLookup{}}
	ctx := context.Background()
	for range 2 {
		if d, _, err := l.resolve(ctx, nil); err != nil || d != classOurs {
			t.Fatalf("the default class (the driver's): %v %v", d, err)
		}
		if d, _, err := l.resolve(ctx, ptr("")); err != nil || d != classStatic {
			t.Fatalf("no class: %v %v, want static (only a pre-made volume binds it)", d, err)
		}
	}
	if len(c.asked) != 2 {
		t.Fatalf("look-ups %v: want the default class and no class once each", c.asked)
	}
}

// A pending claim older than the live window, with the cache synced (a local-PV
// StatefulSet's pod), costs its admission one GET of the claim and nothing else of the
// claim's: ClaimVolume says the cache can be trusted (MaybeStale unset), so the look-up of
// the volumes pre-bound to it is not made again live. A new claim is looked up again.
func TestOldPendingClaimReadOnce(t *testing.T) {
	start, cs := oldAndFreshClaims()
	p := startPrebound(t, cs)
	k := KubeVolumeClaims{Client: cs, Prebound: p, now: func() time.Time { return start }}
	gets := func() (n int) {
		for _, a := range cs.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "persistentvolumeclaims" {
				n++
			}
		}
		return n
	}
	for claim, want := range map[string]int{"old": 1, "fresh": 2} {
		before := gets()
		u := usage{vols: driverVolumes{}}
		classes := &classLookups{claims: k, driver: contract.DriverName, done: map[string]classLookup{}}
		u.claim(context.Background(), k, classes, contract.DriverName, "ns", "v", claim)
		if got := gets() - before; got != want {
			t.Errorf("claim %s: %d GETs of it in one admission, want %d", claim, got, want)
		}
	}
}
