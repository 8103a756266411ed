package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/emulatorauth"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/secretscan"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/credentials"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

const (
	wifProvider = "//iam.googleapis.com/projects/0/locations/global/workloadIdentityPools/local/providers/kubernetes"
	appIdentity = "system:serviceaccount:ns:app"
)

// fakeReviewer plays the API server's TokenReview for the emulator's STS: it knows the
// tokens the test made, each for one user and audience, and can revoke them.
type fakeReviewer struct {
	mu      sync.Mutex
	users   map[string]string
	reviews map[string]int
}

func (f *fakeReviewer) add(token, user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[token] = user
}

func (f *fakeReviewer) revoke(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, token)
}

func (f *fakeReviewer) count(token string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews[token]
}

func (f *fakeReviewer) Review(_ context.Context, token, aud string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews[token]++
	u, ok := f.users[token]
	if !ok || aud != contract.TokenAudience {
		return "", errors.New("invalid bearer token")
	}
	return u, nil
}

// events are the node plugin's Events on pods, as "reason: message" lines to wait for and
// to scan for secrets.
type events struct{ podevents.Recorder }

func (e *events) lines() []string {
	var out []string
	for _, ev := range e.Events() {
		out = append(out, ev.Reason+": "+ev.Msg)
	}
	return out
}

func (e *events) wait(t *testing.T, reason string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		all := e.lines()
		for _, ev := range all {
			if strings.HasPrefix(ev, reason+": ") {
				return ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event after %s; events: %q", reason, d, all)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// authEnv is an emulator behind the auth layer, a node plugin configured for it, and
// everything they log.
type authEnv struct {
	*testenv.Env
	emu     *emulator.Server
	layer   *emulatorauth.Layer
	rev     *fakeReviewer
	events  *events
	nodeLog *syncbuf.Buffer
}

func newAuthEnv(t *testing.T, lifetime time.Duration, buckets ...string) *authEnv {
	t.Helper()
	return newAuthEnvWith(t, lifetime, false, buckets...)
}

// newAuthEnvWith is newAuthEnv, with the shared mount mode on when shared (its mounter not
// started).
func newAuthEnvWith(t *testing.T, lifetime time.Duration, shared bool, buckets ...string) *authEnv {
	t.Helper()
	return newAuthEnvOpts(t, lifetime, func(o *testenv.Options) { o.Shared = shared }, buckets...)
}

// newAuthEnvOpts is newAuthEnv with the env's options changed by opts.
func newAuthEnvOpts(t *testing.T, lifetime time.Duration, opts func(*testenv.Options), buckets ...string) *authEnv {
	t.Helper()
	a := &authEnv{rev: &fakeReviewer{users: map[string]string{}, reviews: map[string]int{}}, events: &events{}, nodeLog: &syncbuf.Buffer{Echo: echo(t)}}
	var err error
	a.emu, err = emulator.StartWith(emulator.Options{Host: "127.0.0.1", Buckets: buckets,
		Wrap: func(base string, storage http.Handler) (http.Handler, error) {
			l, err := emulatorauth.New(emulatorauth.Config{BaseURL: base, TokenLifetime: lifetime, Provider: wifProvider,
				TokenAudience: contract.TokenAudience, Reviewer: a.rev, Log: testLogger(t)}, storage)
			a.layer = l
			return l, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.emu.Stop)
	o := testenv.Options{Emulator: a.emu, SidecarBin: sidecarBin, Events: a.events,
		Log:          slog.New(slog.NewTextHandler(a.nodeLog, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Credentials:  credentials.Config{TokenURL: a.layer.STSURL(), IAMCredentialsURL: a.emu.URL, KeyTokenURIs: []string{a.layer.TokenURL()}},
		SharedLinger: time.Minute}
	opts(&o)
	a.Env, err = testenv.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Env.Close)
	return a
}

// federated is a publish request of volume "data" for bucket with the kubelet's token.
func federated(pod *testenv.Pod, bucket, token string) *csi.NodePublishVolumeRequest {
	req := pod.PublishRequest("data", bucket, "", false)
	toks, _ := json.Marshal(map[string]any{contract.TokenAudience: map[string]string{"token": token, "expirationTimestamp": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}})
	req.VolumeContext[contract.AttrWorkloadIdentityProvider] = wifProvider
	req.VolumeContext[contract.CtxSAName] = "app"
	req.VolumeContext[contract.CtxPodNamespace] = "ns"
	req.VolumeContext[contract.CtxSATokens] = string(toks)
	return req
}

func ksaToken(name string) string {
	return "eyJhbGciOiJSUzI1NiJ9." + name + "-" + itoa(int(time.Now().UnixNano()%1e9)) + ".c2ln"
}

// assertNoSecrets fails if any secret the emulator issued or received appears in out.
func (a *authEnv) assertNoSecrets(t *testing.T, outputs map[string]string) {
	t.Helper()
	issued := a.layer.Issued()
	if len(issued) == 0 {
		t.Fatal("the emulator issued nothing: the check would prove nothing")
	}
	for name, out := range outputs {
		for _, s := range issued {
			for _, part := range secretscan.Parts(s) {
				if strings.Contains(out, part) {
					t.Errorf("%s contains a secret the emulator issued or received (%d bytes)", name, len(s))
				}
			}
		}
	}
}

// checkCredentialFiles checks the credentials directory of the pod's volume "data": both
// levels 0700 directories of the sidecar's user, holding exactly the files of want (in the
// directory's order), each a 0600 file of the sidecar's user.
func checkCredentialFiles(t *testing.T, pod *testenv.Pod, want ...func(podfiles.Paths, string) string) {
	t.Helper()
	dir := podfiles.At(pod.TmpDir).CredentialsDir("data")
	var wantPaths []string
	for _, f := range want {
		wantPaths = append(wantPaths, f(podfiles.At(pod.TmpDir), "data"))
	}
	for _, p := range []string{filepath.Dir(dir), dir} {
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); !st.IsDir() || sys.Uid != contract.SidecarUID || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v uid %d, want a 0700 directory of %d", p, st.Mode(), sys.Uid, contract.SidecarUID)
		}
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		names = append(names, p)
		st, _ := os.Lstat(p)
		if sys := st.Sys().(*syscall.Stat_t); !st.Mode().IsRegular() || sys.Uid != contract.SidecarUID || sys.Gid != contract.SidecarGID || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v uid %d gid %d, want a 0600 file of %d", e.Name(), st.Mode(), sys.Uid, sys.Gid, contract.SidecarUID)
		}
	}
	if fmt.Sprint(names) != fmt.Sprint(wantPaths) {
		t.Errorf("credential files %v, want %v", names, wantPaths)
	}
}

// TestFederatedIdentityReadsAndWritesItsBucket: the pod's own Kubernetes token, exchanged
// at the STS by the real gcsfuse (--key-file on the node plugin's external_account file),
// reads and writes a bucket that only that identity may use; a bucket it may not use fails
// the volume with an Event naming volume, bucket and identity, and the mount answers EIO.
func TestFederatedIdentityReadsAndWritesItsBucket(t *testing.T) {
	a := newAuthEnv(t, 0, "bucket-a", "bucket-b")
	a.layer.SetPolicy("bucket-a", &emulatorauth.Policy{Writers: []string{appIdentity}})
	a.layer.SetPolicy("bucket-b", &emulatorauth.Policy{Writers: []string{"system:serviceaccount:ns:other"}})
	token := ksaToken("app")
	a.rev.add(token, appIdentity)

	pod, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := pod.PublishReq(ctx(t), federated(pod, "bucket-a", token)); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	checkCredentialFiles(t, pod, podfiles.Paths.CredentialsConfigFile, podfiles.Paths.CredentialsTokenFile)
	sc, err := pod.StartSidecar(contract.ModeNative, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatalf("mount not ready: %v\n%s", err, sc.Output())
	}
	data := randomBytes(t, 1<<20)
	if err := writeFile(filepath.Join(pod.Target("data"), "out.bin"), data); err != nil {
		t.Fatalf("write through the federated identity: %v\n%s", err, sc.Output())
	}
	requireObjectIn(t, a.emu, "bucket-a", "out.bin", data)
	a.emu.CreateObject(fakestorageObject("bucket-a", "in.txt", "hello"))
	if b, err := readFile(filepath.Join(pod.Target("data"), "in.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("read through the federated identity: %q %v", b, err)
	}
	if a.rev.count(token) == 0 {
		t.Fatal("the STS never reviewed the pod's token: gcsfuse did not use it")
	}
	pids := pod.GcsfusePIDs()
	if len(pids) != 1 {
		t.Fatalf("gcsfuse pids %v", pids)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[0]))
	args := strings.Split(string(cmdline), "\x00")
	keyFlag := "--key-file=" + podfiles.At(pod.TmpDir).CredentialsConfigFile("data")
	if !contains(args, keyFlag) || contains(args, "--anonymous-access") {
		t.Errorf("gcsfuse args %q: want %s and no --anonymous-access", args, keyFlag)
	}

	// Same pod identity, bucket-b: refused before gcsfuse mounts an empty directory.
	pod2, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := pod2.PublishReq(ctx(t), federated(pod2, "bucket-b", token)); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	sc2, err := pod2.StartSidecar(contract.ModeNative, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	ev := a.events.wait(t, contract.EventGcsfuseFailed, 20*time.Second)
	for _, want := range []string{"volume data", "bucket-b", "Kubernetes service account ns/app through " + wifProvider,
		appIdentity + " does not have storage.objects.get access to bucket bucket-b", "403"} {
		if !strings.Contains(ev, want) {
			t.Errorf("Event %q does not say %q", ev, want)
		}
	}
	if _, err := bounded(func() ([]byte, error) { _, err := os.ReadDir(pod2.Target("data")); return nil, err }); !errors.Is(err, syscall.EIO) {
		t.Errorf("listing the refused bucket: %v, want EIO (not an empty directory)", err)
	}
	a.assertNoSecrets(t, map[string]string{"node plugin log": a.nodeLog.String(), "sidecar output": sc.Output() + sc2.Output(),
		"events": strings.Join(a.events.lines(), "\n")})
}

// mountOpTimeout bounds one file operation on a mount: a gcsfuse that gets no token retries
// for a long time, and the test must fail then, not hang in the kernel.
const mountOpTimeout = 30 * time.Second

// writeFile and readFile are os.WriteFile and os.ReadFile bounded by mountOpTimeout (the
// operation goes on in the background; Env.Close kills gcsfuse, which ends it).
func writeFile(path string, data []byte) error {
	_, err := bounded(func() ([]byte, error) { return nil, os.WriteFile(path, data, 0o644) })
	return err
}

func readFile(path string) ([]byte, error) {
	return bounded(func() ([]byte, error) { return os.ReadFile(path) })
}

func bounded(op func() ([]byte, error)) ([]byte, error) {
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() { // ends when the operation does; see mountOpTimeout
		b, err := op()
		ch <- result{b, err}
	}()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-time.After(mountOpTimeout):
		return nil, fmt.Errorf("still blocked after %s", mountOpTimeout)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestTokenRefreshKeepsServing: access tokens live 3 s; gcsfuse keeps exchanging the
// token file for new ones while the pod writes and reads over more than two lifetimes.
// Then the kubelet's republish brings a new Kubernetes token and the old one is revoked:
// the node plugin rewrites the token file (atomically, same owner and mode), the running
// gcsfuse is not disturbed, and its next exchange uses the new token.
func TestTokenRefreshKeepsServing(t *testing.T) {
	const lifetime = 3 * time.Second
	a := newAuthEnv(t, lifetime, "bucket-r")
	a.layer.SetPolicy("bucket-r", &emulatorauth.Policy{Writers: []string{appIdentity}})
	oldTok := ksaToken("old")
	a.rev.add(oldTok, appIdentity)
	pod, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := federated(pod, "bucket-r", oldTok)
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatal(err)
	}
	sc, err := pod.StartSidecar(contract.ModeNative, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatalf("mount not ready: %v\n%s", err, sc.Output())
	}
	pid := pod.GcsfusePIDs()
	start := time.Now()
	for i := 0; time.Since(start) < 2*lifetime+2*time.Second; i++ {
		name := fmt.Sprintf("f%d", i)
		data := randomBytes(t, 4096)
		if err := writeFile(filepath.Join(pod.Target("data"), name), data); err != nil {
			t.Fatalf("write %s after %s: %v\n%s", name, time.Since(start), err, sc.Output())
		}
		if b, err := readFile(filepath.Join(pod.Target("data"), name)); err != nil || len(b) != len(data) {
			t.Fatalf("read %s after %s: %v", name, time.Since(start), err)
		}
		requireObjectIn(t, a.emu, "bucket-r", name, data)
		time.Sleep(500 * time.Millisecond)
	}
	exchanges := a.rev.count(oldTok)
	if exchanges < 3 {
		t.Fatalf("%d token exchanges over %s with %s tokens: gcsfuse did not refresh", exchanges, time.Since(start), lifetime)
	}

	// Republish: identical request -> success, nothing written.
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatalf("identical republish: %v", err)
	}
	tokFile := podfiles.At(pod.TmpDir).CredentialsTokenFile("data")
	before, _ := os.Lstat(tokFile)
	newTok := ksaToken("new")
	a.rev.add(newTok, appIdentity)
	if err := pod.PublishReq(ctx(t), federated(pod, "bucket-r", newTok)); err != nil {
		t.Fatalf("republish with a new token: %v", err)
	}
	a.rev.revoke(oldTok)
	after, _ := os.Lstat(tokFile)
	if b, _ := os.ReadFile(tokFile); string(b) != newTok || os.SameFile(before, after) {
		t.Fatalf("the token file was not replaced by a new file holding the new token")
	}
	checkCredentialFiles(t, pod, podfiles.Paths.CredentialsConfigFile, podfiles.Paths.CredentialsTokenFile)
	deadline := time.Now().Add(2*lifetime + 5*time.Second)
	for a.rev.count(newTok) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("gcsfuse never exchanged the new token")
		}
		_ = writeFile(filepath.Join(pod.Target("data"), "poke"), []byte("x"))
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(lifetime + time.Second) // every token got with the old one has expired
	data := randomBytes(t, 4096)
	if err := writeFile(filepath.Join(pod.Target("data"), "after-refresh"), data); err != nil {
		t.Fatalf("write after the token refresh: %v\n%s", err, sc.Output())
	}
	requireObjectIn(t, a.emu, "bucket-r", "after-refresh", data)
	if got := pod.GcsfusePIDs(); fmt.Sprint(got) != fmt.Sprint(pid) {
		t.Fatalf("gcsfuse changed across the republish: %v -> %v", pid, got)
	}
	a.assertNoSecrets(t, map[string]string{"node plugin log": a.nodeLog.String(), "sidecar output": sc.Output()})
}

// TestServiceAccountKeyFromSecret: a key the emulator made (its public part known to the
// token endpoint), passed as NodePublishVolume secrets as the kubelet passes a
// nodePublishSecretRef, gets gcsfuse tokens through a signed JWT grant.
func TestServiceAccountKeyFromSecret(t *testing.T) {
	a := newAuthEnv(t, 0, "bucket-k", "bucket-x")
	sa := "writer@emulator-project.iam.gserviceaccount.com"
	key, err := a.layer.CreateServiceAccount(sa)
	if err != nil {
		t.Fatal(err)
	}
	a.layer.SetPolicy("bucket-k", &emulatorauth.Policy{Writers: []string{"serviceAccount:" + sa}})
	a.layer.SetPolicy("bucket-x", &emulatorauth.Policy{Readers: []string{"serviceAccount:someone-else@emulator-project.iam.gserviceaccount.com"}})
	pod, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := pod.PublishRequest("data", "bucket-k", "", false)
	req.Secrets = map[string]string{contract.SecretKeyServiceAccount: string(key)}
	if err := pod.PublishReq(ctx(t), req); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	checkCredentialFiles(t, pod, podfiles.Paths.CredentialsConfigFile)
	sc, err := pod.StartSidecar(contract.ModeLegacy, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		t.Fatalf("mount not ready: %v\n%s", err, sc.Output())
	}
	data := randomBytes(t, 64<<10)
	if err := writeFile(filepath.Join(pod.Target("data"), "k.bin"), data); err != nil {
		t.Fatalf("write with the key: %v\n%s", err, sc.Output())
	}
	requireObjectIn(t, a.emu, "bucket-k", "k.bin", data)

	pod2, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req2 := pod2.PublishRequest("data", "bucket-x", "", false)
	req2.Secrets = req.Secrets
	if err := pod2.PublishReq(ctx(t), req2); err != nil {
		t.Fatal(err)
	}
	sc2, err := pod2.StartSidecar(contract.ModeLegacy, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	ev := a.events.wait(t, contract.EventGcsfuseFailed, 20*time.Second)
	if !strings.Contains(ev, "bucket-x") || !strings.Contains(ev, "service account "+sa) || !strings.Contains(ev, "403") {
		t.Errorf("Event %q does not name the bucket, the key's service account and the refusal", ev)
	}
	a.assertNoSecrets(t, map[string]string{"node plugin log": a.nodeLog.String(), "sidecar output": sc.Output() + sc2.Output(),
		"events": strings.Join(a.events.lines(), "\n")})
}

// TestMissingCredentialFailsThePublish: a volume that asks for federation without the
// kubelet's token (no tokenRequests in the CSIDriver), or whose Secret has no key, fails
// NodePublishVolume with a code and a message a user can act on (the kubelet's FailedMount
// Event on the pod), naming the volume, the bucket and the identity, and mounts nothing.
func TestMissingCredentialFailsThePublish(t *testing.T) {
	a := newAuthEnv(t, 0, "bucket-m")
	pod, err := a.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	req := federated(pod, "bucket-m", "x.y.z")
	delete(req.VolumeContext, contract.CtxSATokens)
	err = pod.PublishReq(ctx(t), req)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "volume data (bucket bucket-m, identity Kubernetes service account ns/app") ||
		!strings.Contains(err.Error(), "tokenRequests") {
		t.Fatalf("no token: %v", err)
	}
	req = pod.PublishRequest("data", "bucket-m", "", false)
	req.Secrets = map[string]string{"username": "x"}
	if err := pod.PublishReq(ctx(t), req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `no key "key.json"`) {
		t.Fatalf("Secret without a key: %v", err)
	}
	if _, err := os.Lstat(pod.Target("data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused publish left a target: %v", err)
	}
}
