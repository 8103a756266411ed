package sharedmounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/sakey"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// When a pod leaves a shared mount, the mount's token file gets the freshest token of
// another pod bound to the same mount, never one of a pod of another mount (another key:
// another service account, whose token would have the mount read as someone else).
func TestHandOverTokenStaysWithinTheMount(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	if err := os.MkdirAll(s.mounterDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	a, b := sharedmount.MountName(sharedmount.Key{Bucket: "a"}.Name(), 1), sharedmount.MountName(sharedmount.Key{Bucket: "b"}.Name(), 1)
	plan := func(tok string, expiry time.Duration) *credentials.Plan {
		return &credentials.Plan{Kind: credentials.KindFederation, Identity: "ksa " + tok, Token: []byte(tok), TokenExpiry: time.Now().Add(expiry), Config: []byte("{}\n")}
	}
	s.cfg.Store.PutPlan("/t/leaving", nodevolume.SharedPlan{Mount: a, Plan: plan("a-leaving", time.Hour)})
	s.cfg.Store.PutPlan("/t/staying", nodevolume.SharedPlan{Mount: a, Plan: plan("a-staying", 30*time.Minute)})
	s.cfg.Store.PutPlan("/t/expiring", nodevolume.SharedPlan{Mount: a, Plan: plan("a-expiring", 10*time.Minute)}) // not the freshest
	s.cfg.Store.PutPlan("/t/other", nodevolume.SharedPlan{Mount: b, Plan: plan("b-fresher", 2*time.Hour)})
	s.handOverToken("/t/leaving", a)
	tok, err := os.ReadFile(filepath.Join(s.mounterDir(), "credentials", a, "token"))
	if err != nil || string(tok) != "a-staying" {
		t.Fatalf("mount a's token after its pod left: %q %v, want a-staying (its mount's freshest; never b's)", tok, err)
	}
	if _, ok := s.cfg.Store.Plan("/t/leaving"); ok {
		t.Fatal("the leaving target's plan stayed")
	}
}

// Only a Kubernetes token is handed over, to the mounter's user: a leaving pod that read with
// a key or the mounter's credentials leaves the files as they are (no token of its pod to
// outlive), a key's plan is never taken for a token, and with no other pod's token there is
// nothing to write.
func TestHandOverTokenOnlyBetweenFederationPlans(t *testing.T) {
	mount := sharedmount.MountName(sharedmount.Key{Bucket: "a"}.Name(), 1)
	plan := func(kind credentials.Kind, tok string, expiry time.Duration) *credentials.Plan {
		return &credentials.Plan{Kind: kind, Identity: "id " + tok, Token: []byte(tok), TokenExpiry: time.Now().Add(expiry), Config: []byte("{}\n")}
	}
	for what, tc := range map[string]struct {
		leaving *credentials.Plan
		others  []*credentials.Plan
		want    string // the token file after; "" when none is written
	}{
		"a key's pod leaving":             {plan(credentials.KindKey, "leaving", time.Hour), []*credentials.Plan{plan(credentials.KindFederation, "staying", time.Hour)}, ""},
		"a key's fresher plan staying":    {plan(credentials.KindFederation, "leaving", time.Hour), []*credentials.Plan{plan(credentials.KindKey, "key", 3*time.Hour), plan(credentials.KindFederation, "staying", time.Hour)}, "staying"},
		"only a key's plan staying":       {plan(credentials.KindFederation, "leaving", time.Hour), []*credentials.Plan{plan(credentials.KindKey, "key", 3*time.Hour)}, ""},
		"no other pod":                    {plan(credentials.KindFederation, "leaving", time.Hour), nil, ""},
		"the freshest of several staying": {plan(credentials.KindFederation, "leaving", 3*time.Hour), []*credentials.Plan{plan(credentials.KindFederation, "older", time.Minute), plan(credentials.KindFederation, "fresher", 2*time.Hour), plan(credentials.KindFederation, "old", time.Hour)}, "fresher"},
	} {
		t.Run(what, func(t *testing.T) {
			s := bareMounter(t, t.TempDir())
			if os.Getuid() == 0 {
				s.cfg.UID, s.cfg.GID = 1234, 5678
			}
			if err := os.MkdirAll(s.mounterDir(), 0o750); err != nil {
				t.Fatal(err)
			}
			s.cfg.Store.PutPlan("/t/leaving", nodevolume.SharedPlan{Mount: mount, Plan: tc.leaving})
			for i, p := range tc.others {
				s.cfg.Store.PutPlan(fmt.Sprintf("/t/other-%d", i), nodevolume.SharedPlan{Mount: mount, Plan: p})
			}
			s.handOverToken("/t/leaving", mount)
			tokenFile := podfiles.At(s.mounterDir()).CredentialsTokenFile(mount)
			tok, err := os.ReadFile(tokenFile)
			if tc.want == "" {
				if !errors.Is(err, os.ErrNotExist) {
					t.Errorf("token file %q %v, want none written", tok, err)
				}
				return
			}
			if err != nil || string(tok) != tc.want {
				t.Fatalf("token %q %v, want %s", tok, err, tc.want)
			}
			st, err := os.Stat(tokenFile)
			if err != nil {
				t.Fatal(err)
			}
			if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != s.cfg.UID || int(sys.Gid) != s.cfg.GID {
				t.Errorf("the token file owned by %d:%d, want the mounter's %d:%d", sys.Uid, sys.Gid, s.cfg.UID, s.cfg.GID)
			}
		})
	}
}

// The mounter admits a volume reading with its Application Default Credentials only in
// the namespaces Config.ADC names, and checks the volume context's namespace against the
// pod watcher's: PermissionDenied otherwise, as NodePublishVolume asks it.
func TestAdmitChecksSharedADC(t *testing.T) {
	s := bareMounter(t, t.TempDir())
	s.cfg.ADC = credentials.SharedADC{"batch"}
	r := func(ns string) *nodevolume.Request {
		return &nodevolume.Request{Pod: nodevolume.PodRef{Namespace: ns, Name: "p", UID: "uid-1"}, Target: podfiles.Target{VolumeName: "data"},
			Opts: &mountopts.Volume{Bucket: "b", Shared: true}, Creds: &credentials.Plan{Kind: credentials.KindADC}}
	}
	if err := s.Admit(r("ns")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("ADC in ns, outside the allowed namespaces: %v, want PermissionDenied", err)
	}
	if err := s.Admit(r("batch")); err != nil {
		t.Errorf("ADC in batch, allowed: %v", err)
	}
	notShared, federation := r("ns"), r("ns")
	notShared.Opts.Shared = false
	federation.Creds.Kind = credentials.KindFederation
	if err := s.Admit(notShared); err != nil {
		t.Errorf("ADC in ns for a volume not shared (its pod's sidecar reads): %v, want admitted", err)
	}
	if err := s.Admit(federation); err != nil {
		t.Errorf("the pod's own identity in ns: %v, want admitted", err)
	}
	// Every identity of the volume's own is admitted anywhere: only the mounter's ADC is
	// confined to the allowed namespaces.
	for _, kind := range []credentials.Kind{credentials.KindFederation, credentials.KindKey} {
		own := r("ns")
		own.Creds.Kind = kind
		if err := s.Admit(own); err != nil {
			t.Errorf("a %s volume in ns: %v, want admitted", kind, err)
		}
	}
	s.cfg.Pods = func(uid string) (*corev1.Pod, bool) {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", UID: types.UID(uid)}}, true
	}
	if err := s.Admit(r("batch")); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"team-a"`) {
		t.Errorf("a volume context naming another namespace than the pod's: %v, want PermissionDenied", err)
	}
}

// The kubelet's republish of a bound target writes the pod's fresh token into its mount's
// files once, and says so (the node plugin logs "credentials refreshed" from what Refresh
// returns): a second write of the same bytes would report nothing changed.
func TestRefreshOfABoundTargetWritesTheMountsToken(t *testing.T) {
	const provider = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/prov"
	s := bareMounter(t, t.TempDir())
	if err := os.MkdirAll(s.mounterDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	s.cfg.Credentials = credentials.Config{SharedProvider: provider}.WithDefaults().ForShared()
	table := withTable(t, s)
	mount := sharedmount.MountName(sharedmount.Key{Bucket: "b"}.Name(), 1)
	target := podfiles.CSITargetPath("/var/lib/kubelet", "uid-1", "data")
	table.Restore(mount, []sharedmount.User{{Target: target, PodUID: "uid-1", Volume: "data"}})
	req := &csi.NodePublishVolumeRequest{TargetPath: target, VolumeContext: map[string]string{
		contract.AttrBucketName: "b", contract.AttrMountMode: contract.MountModeShared,
		contract.CtxSATokens: `{"gcsfuse.csi.storage":{"token":"a.b.c","expirationTimestamp":"2030-01-01T00:00:00Z"}}`}}
	r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Pod: nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"},
		Opts: &mountopts.Volume{Bucket: "b", Shared: true}, Volume: handoff.Volume{Bucket: "b"}}
	// The target's first publish read as this service account: a republish reading as
	// another is refused and writes nothing; one as the same account goes on.
	r.Creds = &credentials.Plan{Kind: credentials.KindFederation, Identity: "Kubernetes service account ns/writer"}
	s.cfg.Store.PutPlan(target, nodevolume.SharedPlan{Mount: mount, Plan: &credentials.Plan{Kind: credentials.KindFederation, Identity: "Kubernetes service account ns/reader"}})
	if _, err := s.Refresh(context.Background(), req, r); status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "ns/writer") || !strings.Contains(err.Error(), "ns/reader") {
		t.Fatalf("a republish as another service account: %v, want AlreadyExists naming both", err)
	}
	if _, err := os.Stat(filepath.Join(s.mounterDir(), "credentials", mount, "token")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused republish wrote the mount's token: %v", err)
	}
	r.Creds = &credentials.Plan{Kind: credentials.KindFederation, Identity: "Kubernetes service account ns/reader"}
	w, err := s.Refresh(context.Background(), req, r)
	if err != nil {
		t.Fatal(err)
	}
	if !w.Token {
		t.Errorf("a fresh token written into the mount's files reported as unchanged: %+v", w)
	}
	tokenFile := filepath.Join(s.mounterDir(), "credentials", mount, "token")
	if b, err := os.ReadFile(tokenFile); err != nil || string(b) != "a.b.c" {
		t.Fatalf("the mount's token: %q %v", b, err)
	}
	// The republish's token is what the mount's next hand-over writes: another pod of the
	// mount, whose token the files hold now, leaves, and this pod's fresh one takes over.
	leaving := podfiles.CSITargetPath("/var/lib/kubelet", "uid-2", "data")
	s.cfg.Store.PutPlan(leaving, nodevolume.SharedPlan{Mount: mount, Plan: &credentials.Plan{Kind: credentials.KindFederation,
		Identity: "ksa ns/other", Token: []byte("leaving.tok"), TokenExpiry: time.Now().Add(time.Hour), Config: []byte("{}\n")}})
	if err := os.WriteFile(tokenFile, []byte("leaving.tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.handOverToken(leaving, mount)
	if b, err := os.ReadFile(tokenFile); err != nil || string(b) != "a.b.c" {
		t.Fatalf("the mount's token after the other pod left: %q %v, want the republished a.b.c", b, err)
	}
}

// Who reads with a plan: its kind and identity, a key's ID left out (a rotated key of the
// same service account reads as the same one, another account does not).
func TestPrincipalLeavesOutTheKeysID(t *testing.T) {
	key := func(id string) *credentials.Plan { return &credentials.Plan{Kind: credentials.KindKey, Identity: id} }
	if a, b := principal(key("sa@p.iam (key 1111)")), principal(key("sa@p.iam (key 2222)")); a != b || a != string(credentials.KindKey)+": sa@p.iam" {
		t.Errorf("two keys of one account: %q, %q; want both %q", a, b, string(credentials.KindKey)+": sa@p.iam")
	}
	if principal(key("sa@p.iam (key 1)")) == principal(key("other@p.iam (key 1)")) {
		t.Error("two accounts' keys read as one")
	}
	fed := &credentials.Plan{Kind: credentials.KindFederation, Identity: "sa@p.iam (key 1)"}
	if principal(fed) == principal(key("sa@p.iam (key 1)")) || principal(fed) != string(credentials.KindFederation)+": sa@p.iam (key 1)" {
		t.Errorf("a federation plan's principal %q: its identity is kept whole, its kind apart", principal(fed))
	}
}

// testKeySecret is a Secret's service-account key of account sa, with key ID id.
func testKeySecret(t *testing.T, sa, id string) map[string]string {
	return map[string]string{contract.SecretKeyServiceAccount: sakey.JSON(t, sa, id)}
}

// TestRefreshWithARotatedKey: a shared target first published with one key of a service
// account takes the kubelet's republish with a new key of the same account (a rotation: the
// same reader, whose mount's key file is rewritten), and refuses one of another account,
// AlreadyExists, writing nothing: that would change who reads for every pod of the mount.
func TestRefreshWithARotatedKey(t *testing.T) {
	const sa, other = "reader@my-project.iam.gserviceaccount.com", "writer@my-project.iam.gserviceaccount.com"
	s := bareMounter(t, t.TempDir())
	if err := os.MkdirAll(s.mounterDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	s.cfg.Credentials = credentials.Config{}.WithDefaults().ForShared()
	table := withTable(t, s)
	mount := sharedmount.MountName(sharedmount.Key{Bucket: "b"}.Name(), 1)
	target := podfiles.CSITargetPath("/var/lib/kubelet", "uid-1", "data")
	table.Restore(mount, []sharedmount.User{{Target: target, PodUID: "uid-1", Volume: "data"}})
	s.cfg.Store.PutPlan(target, nodevolume.SharedPlan{Mount: mount, Plan: &credentials.Plan{Kind: credentials.KindKey, Identity: "service account " + sa + " (key aaaa1111)"}})
	publish := func(account, id string) (*nodevolume.Request, error) {
		req := &csi.NodePublishVolumeRequest{TargetPath: target, Secrets: testKeySecret(t, account, id), VolumeContext: map[string]string{
			contract.AttrBucketName: "b", contract.AttrMountMode: contract.MountModeShared}}
		r := &nodevolume.Request{Target: podfiles.Target{PodUID: "uid-1", VolumeName: "data"}, Pod: nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"},
			Opts: &mountopts.Volume{Bucket: "b", Shared: true}, Volume: handoff.Volume{Bucket: "b"},
			Creds: &credentials.Plan{Kind: credentials.KindKey, Identity: "service account " + account + " (key " + id + ")"}}
		_, err := s.Refresh(context.Background(), req, r)
		return r, err
	}
	if _, err := publish(other, "cccc3333"); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a republish with another account's key: %v, want AlreadyExists", err)
	}
	keyDir := filepath.Join(s.mounterDir(), "credentials", mount)
	if entries, _ := os.ReadDir(keyDir); len(entries) != 0 {
		t.Fatalf("a refused republish wrote the mount's files: %v", entries)
	}
	if _, err := publish(sa, "bbbb2222"); err != nil {
		t.Fatalf("a republish with a rotated key of the same account: %v", err)
	}
	if entries, _ := os.ReadDir(keyDir); len(entries) == 0 {
		t.Error("the rotated key was not written into the mount's files")
	}
	if p, ok := s.cfg.Store.Plan(target); !ok || p.Plan.Identity != "service account "+sa+" (key bbbb2222)" {
		t.Errorf("the target's plan after the rotation: %+v, want the new key's", p.Plan)
	}
}
