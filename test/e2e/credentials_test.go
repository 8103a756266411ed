package e2e

// Credentials on the real cluster (docs/credentials.md): a pod reads and writes its bucket
// as its own Kubernetes service account (Workload Identity Federation: the kubelet's token,
// exchanged by gcsfuse at the emulator's STS, which validates it with a TokenReview), or as
// the service account whose key its volume's Secret holds; a bucket the identity may not
// use fails with an Event naming volume, bucket and identity; a pod keeps reading and
// writing across access token expiries; and no token or key reaches a log, an Event or a
// flag.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/secretscan"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// localProvider is the Workload Identity provider the local overlay's emulator serves.
const localProvider = "//iam.googleapis.com/projects/0/locations/global/workloadIdentityPools/local/providers/kubernetes"

// checkerIdentity reads and writes every bucket with a policy, for the tests' own checks.
const checkerIdentity = "user:e2e-checker"

// kubeletRoot is where the local cluster's kubelet keeps pods.
const kubeletRoot = "/var/lib/kubelet"

var (
	policedMu sync.Mutex
	policed   = map[string]bool{}
	// sidecarLogs collects the sidecar logs of the credential tests' pods before they are
	// deleted, for the secrets check.
	sidecarLogsMu sync.Mutex
	sidecarLogs   []string
)

func isPoliced(bucket string) bool {
	policedMu.Lock()
	defer policedMu.Unlock()
	return policed[bucket]
}

// admin calls the emulator's admin API (it answers to this node only).
func admin(t *testing.T, method, path string, body any) []byte {
	t.Helper()
	b, err := adminDo(context.Background(), method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// adminDo sends one request to the emulator's admin API and returns its answer's body; an
// answer other than 200 is an error.
func adminDo(ctx context.Context, method, path string, body any) ([]byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, gcsURL+"/_admin/"+path, r)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("emulator admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("emulator admin %s %s: %s %s", method, path, resp.Status, b)
	}
	return b, nil
}

// setPolicy lets writers read and write bucket (and the checker).
func setPolicy(t *testing.T, bucket string, writers ...string) {
	t.Helper()
	admin(t, http.MethodPut, "policies/"+bucket, map[string][]string{"writers": append(writers, checkerIdentity)})
	policedMu.Lock()
	policed[bucket] = true
	policedMu.Unlock()
}

// checkerToken is a fresh access token of checkerIdentity.
func checkerToken(t *testing.T) string {
	t.Helper()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(admin(t, http.MethodPost, "tokens", map[string]string{"identity": checkerIdentity}), &tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("checker token: %v", err)
	}
	return tok.AccessToken
}

// uploadPoliced is upload for a bucket with a policy.
func uploadPoliced(t *testing.T, bucket, name string, size int64) {
	t.Helper()
	u := fmt.Sprintf("%s/upload/storage/v1/b/%s/o?uploadType=media&name=%s", gcsURL, bucket, url.QueryEscape(name))
	req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(patternBytes(size)))
	req.Header.Set("Authorization", "Bearer "+checkerToken(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("upload %s/%s: %s %s", bucket, name, resp.Status, msg)
	}
}

func createServiceAccount(t *testing.T, name string) string {
	t.Helper()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service account %s: %v", name, err)
	}
	return "system:serviceaccount:" + ns + ":" + name
}

// keepSidecarLog stores a pod's sidecar log for the secrets check.
func keepSidecarLog(pod string) {
	l := logs(pod, contract.SidecarContainerName)
	sidecarLogsMu.Lock()
	sidecarLogs = append(sidecarLogs, pod+":\n"+l)
	sidecarLogsMu.Unlock()
}

func deleteNow(t *testing.T, pod string) {
	t.Helper()
	keepSidecarLog(pod)
	_ = cs.CoreV1().Pods(ns).Delete(context.Background(), pod, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
}

// hostFiles is the layout of the pod's gcsfuse-tmp emptyDir, on this host.
func hostFiles(p *corev1.Pod) podfiles.Paths {
	return podfiles.At(podfiles.TmpDirPath(kubeletRoot, string(p.UID)))
}

// checkOwned fails unless path is owned by the sidecar's user with mode (and no symlink).
func checkOwned(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if sys.Uid != contract.SidecarUID || sys.Gid != contract.SidecarGID || st.Mode().Perm() != mode || st.Mode()&os.ModeSymlink != 0 {
		t.Errorf("%s: mode %v uid %d gid %d, want %v owned by %d:%d", path, st.Mode(), sys.Uid, sys.Gid, mode, contract.SidecarUID, contract.SidecarGID)
	}
}

// tokenClaims decodes a service account token's claims (no verification: the emulator's
// STS has the API server do that).
type tokenClaims struct {
	Sub string   `json:"sub"`
	Aud []string `json:"aud"`
	Exp int64    `json:"exp"`
	K8s struct {
		Pod struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

func claimsOf(t *testing.T, token string) tokenClaims {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("the token file does not hold a JWT (%d parts)", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("token claims: %v", err)
	}
	var c tokenClaims
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("token claims: %v", err)
	}
	return c
}

// waitToken waits for the pod's token file and checks the layout: directories 0700, files
// 0600, all owned by the sidecar's user; the token is the pod's own (its service account,
// the driver's audience, bound to this pod). It returns the token.
func waitToken(t *testing.T, name, volume, identity string) string {
	t.Helper()
	p := waitPod(t, name, startWithin, "running its app", appRunning)
	files := hostFiles(p)
	dir := files.CredentialsDir(volume)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Lstat(files.CredentialsTokenFile(volume)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no token file in %s", dir)
		}
		time.Sleep(200 * time.Millisecond)
	}
	checkOwned(t, filepath.Dir(dir), 0o700)
	checkOwned(t, dir, 0o700)
	checkOwned(t, files.CredentialsTokenFile(volume), 0o600)
	checkOwned(t, files.CredentialsConfigFile(volume), 0o600)
	b, err := os.ReadFile(files.CredentialsTokenFile(volume))
	if err != nil {
		t.Fatal(err)
	}
	tok := string(b)
	c := claimsOf(t, tok)
	if c.Sub != identity || c.K8s.Pod.Name != name || c.K8s.Pod.UID != string(p.UID) || !containsString(c.Aud, contract.TokenAudience) {
		t.Errorf("token of pod %s: sub %q pod %s/%s aud %v; want %s bound to this pod for %s", name, c.Sub, c.K8s.Pod.Name, c.K8s.Pod.UID, c.Aud, identity, contract.TokenAudience)
	}
	conf, _ := os.ReadFile(files.CredentialsConfigFile(volume))
	if !strings.Contains(string(conf), `"file": "`+podfiles.At(contract.TmpMountPath).CredentialsTokenFile(volume)+`"`) {
		t.Errorf("the external_account configuration does not point to the token in the sidecar's emptyDir:\n%s", conf)
	}
	// No app container sees the emptyDir that holds it.
	for _, c := range p.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if m.Name == contract.TmpVolumeName && c.Name != contract.SidecarContainerName {
				t.Errorf("container %s mounts %s", c.Name, contract.TmpVolumeName)
			}
		}
	}
	return tok
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// exchange asks the emulator's STS for an access token for a Kubernetes token, as gcsfuse
// does; it returns the HTTP status.
func exchange(t *testing.T, token string) int {
	t.Helper()
	resp, err := http.PostForm(gcsURL+"/sts/v1/token", url.Values{
		"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"}, "audience": {localProvider},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:jwt"}, "subject_token": {token},
		"requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"scope":                {"https://www.googleapis.com/auth/devstorage.full_control"},
	})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func credMode() string {
	if nativeOK {
		return contract.ModeNative
	}
	return contract.ModeLegacy
}

// TestCredentials runs the credential cases in parallel, then checks that none of the
// secrets the emulator issued or received (access tokens, Kubernetes tokens, keys, JWT
// grants) appears in the logs of the node plugin, the webhook and the sidecars, in the
// namespace's Events, or in the flags of the driver's processes.
func TestCredentials(t *testing.T) {
	parallel(t)
	needRoot(t) // reads the credential files on the node
	t.Run("cases", func(t *testing.T) {
		t.Run("federation", testFederation)
		t.Run("secret-key", testSecretKey)
		t.Run("secret-key-pv", testSecretKeyPV)
		t.Run("refresh", func(t *testing.T) { testRefresh(t, false) })
		t.Run("refresh-shared", func(t *testing.T) { testRefresh(t, true) })
		t.Run("access-granted-later", testAccessGrantedLater)
		t.Run("host-network-pod-ksa", testHostNetworkPodKSA)
		t.Run("credential-configmap", testCredentialConfigMap)
	})
	checkNoSecrets(t)
}

// testHostNetworkPodKSA: a hostNetwork pod whose volume sets the GKE driver's
// hostNetworkPodKSA "true" reads as its own service account when the volume names a
// federation provider (its object lands, through the policy that allows only that account),
// and is refused at admission (403, saying what to set) when nothing names one: with
// Application Default Credentials it would read as the node.
func testHostNetworkPodKSA(t *testing.T) {
	t.Parallel()
	identity := createServiceAccount(t, "hostnet-app")
	bucket := newBucket(t)
	setPolicy(t, bucket, identity)
	o := podOpts{restart: corev1.RestartPolicyNever, serviceAccount: "hostnet-app",
		attrs:   map[string]string{"hostNetworkPodKSA": "true"},
		volumes: []volume{{"bucket", bucket, mountPath}},
		args:    []string{"write", "-dir", mountPath, "-name", "hostnet.bin", "-bytes", "4096"}}

	refused := podObject(podName(t, "refused"), o)
	refused.Spec.HostNetwork = true
	_, err := cs.CoreV1().Pods(ns).Create(context.Background(), refused, metav1.CreateOptions{})
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 403 {
		t.Fatalf("hostNetwork pod with hostNetworkPodKSA and no provider: %v, want a 403 denial from the webhook", err)
	}
	for _, want := range []string{"volume bucket", "read as its own Kubernetes service account", "set " + contract.AttrWorkloadIdentityProvider} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the denial lacks %q: %v", want, err)
		}
	}

	o.attrs = map[string]string{"hostNetworkPodKSA": "true", contract.AttrWorkloadIdentityProvider: localProvider}
	name := podName(t, "own")
	own := podObject(name, o)
	own.Spec.HostNetwork = true
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), own, metav1.CreateOptions{}); err != nil {
		t.Fatalf("hostNetwork pod with hostNetworkPodKSA and a provider: %v", err)
	}
	waitSucceeded(t, name)
	expectObject(t, bucket, "hostnet.bin", 4096)
}

// testCredentialConfigMap: a pod naming a credential ConfigMap with the GKE driver's
// annotation (an external_account configuration, as create-cred-config writes it for the
// emulator's pool) writes, through an inline volume and a claim alike, as its own service
// account: the emulator's STS takes its projected token, and the buckets' policies allow
// that account alone. Its gcsfuse reads the configuration the webhook checked, which the
// ConfigMap's deletion right after admission does not change. A pod naming a ConfigMap
// that does not exist is refused (400), saying which and how to make it.
func testCredentialConfigMap(t *testing.T) {
	t.Parallel()
	identity := createServiceAccount(t, "cm-app")
	inline, claimed := newBucket(t), newBucket(t)
	setPolicy(t, inline, identity)
	setPolicy(t, claimed, identity)
	conf, _ := json.Marshal(map[string]any{"type": "external_account", "audience": localProvider,
		"subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": gcsURL + "/sts/v1/token",
		"credential_source": map[string]any{"file": "/var/run/service-account/token", "format": map[string]string{"type": "text"}}})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-app-wif", Namespace: ns},
		Data: map[string]string{"credential-configuration.json": string(conf)}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const annotation = "gke-gcsfuse/workload-identity-credential-configmap"
	claim := staticClaim(t, claimed, true)
	build := func(name, configMap string) *corev1.Pod {
		p := podObject(name, podOpts{mode: credMode(), restart: corev1.RestartPolicyNever, serviceAccount: "cm-app",
			volumes: []volume{{"inline", inline, mountPath}},
			args:    []string{"write", "-dir", mountPath, "-name", "inline.bin", "-bytes", "4096"},
			extra: []corev1.Container{workloadContainer("claim-writer", []volume{{"claimed", claimed, "/claimed"}},
				"write", "-dir", "/claimed", "-name", "claimed.bin", "-bytes", "4096")}})
		p.Annotations[annotation] = configMap
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "claimed", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
		return p
	}

	_, err := cs.CoreV1().Pods(ns).Create(context.Background(), build(podName(t, "missing"), "no-such-config"), metav1.CreateOptions{})
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 400 || !strings.Contains(err.Error(), annotation+": ConfigMap no-such-config not found in namespace "+ns) {
		t.Errorf("a pod naming a missing credential ConfigMap: %v, want a 400 denial naming it", err)
	}

	name := podName(t, "configmap")
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), build(name, cm.Name), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	// What was checked at admission is the pod's: the ConfigMap deleted now changes nothing.
	if err := cs.CoreV1().ConfigMaps(ns).Delete(context.Background(), cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := gcsfusePID(t, inline)
	if args := testenv.ProcessArgs(pid); !containsString(args, "--key-file="+podfiles.At(contract.TmpMountPath).CredentialConfigMapFile("inline")) || containsString(args, "--anonymous-access") {
		t.Errorf("gcsfuse args %q: want the credential ConfigMap's configuration as --key-file", args)
	}
	waitSucceeded(t, name)
	expectObject(t, inline, "inline.bin", 4096)
	expectObject(t, claimed, "claimed.bin", 4096)
}

// testFederation: a pod's own service account reads and writes the bucket its policy
// allows; the same service account on another bucket gets an Event naming volume, bucket
// and identity and I/O errors; each pod has its own token, bound to it, readable only by
// its sidecar's user, and worthless once the pod is gone.
func testFederation(t *testing.T) {
	t.Parallel()
	identity := createServiceAccount(t, "wif-app")
	allowed, denied := newBucket(t), newBucket(t)
	setPolicy(t, allowed, identity)
	setPolicy(t, denied, "system:serviceaccount:"+ns+":someone-else")
	uploadPoliced(t, allowed, "input.bin", mib)
	attrs := map[string]string{contract.AttrWorkloadIdentityProvider: localProvider}

	okPod := podName(t, "allowed")
	createPod(t, okPod, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, serviceAccount: "wif-app", attrs: attrs,
		volumes: []volume{{"bucket", allowed, mountPath}},
		args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(mib), "-then", "20s"},
		extra:   []corev1.Container{workloadContainer("reader", []volume{{"bucket", allowed, mountPath}}, "read", "-dir", mountPath, "-name", "input.bin", "-bytes", strconv.Itoa(mib))},
	})
	okToken := waitToken(t, okPod, "bucket", identity)
	pid := gcsfusePID(t, allowed)
	args := testenv.ProcessArgs(pid)
	if want := "--key-file=" + podfiles.At(contract.TmpMountPath).CredentialsConfigFile("bucket"); !containsString(args, want) || containsString(args, "--anonymous-access") {
		t.Errorf("gcsfuse args %q: want %s and no --anonymous-access", args, want)
	}
	p := waitPod(t, okPod, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: %s\n%s\n%s\nsidecar log:\n%s", okPod, p.Status.Phase, describe(p), podEvents(okPod), logs(okPod, contract.SidecarContainerName))
	}
	expectObject(t, allowed, "out.bin", mib)

	deniedPod := podName(t, "denied")
	createPod(t, deniedPod, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, serviceAccount: "wif-app", attrs: attrs,
		volumes: []volume{{"bucket", denied, mountPath}},
		args:    []string{"sleep", "-for", "20s"},
		extra:   []corev1.Container{workloadContainer("reader", []volume{{"bucket", denied, mountPath}}, "read", "-dir", mountPath, "-name", "input.bin", "-bytes", strconv.Itoa(mib))},
	})
	start := time.Now()
	e := waitEvent(t, deniedPod, 60*time.Second, regexp.MustCompile(`^`+contract.EventGcsfuseFailed+`$`),
		"volume bucket", denied, "Kubernetes service account "+ns+"/wif-app", identity+" does not have storage.objects.get access", "403")
	record(t, "pod created -> denial Event", start, time.Now())
	t.Logf("event: %s", e.Message)
	deniedToken := waitToken(t, deniedPod, "bucket", identity)
	if deniedToken == okToken {
		t.Error("two pods got the same token")
	}
	p = waitPod(t, deniedPod, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodFailed {
		t.Errorf("the pod reading a forbidden bucket ended %s, want Failed (I/O errors, not an empty directory)", p.Status.Phase)
	}
	if !strings.Contains(logs(deniedPod, "reader"), "input/output error") {
		t.Errorf("the read of the forbidden bucket did not fail with an I/O error:\n%s", logs(deniedPod, "reader"))
	}

	// A pod's token is bound to it: once the pod is gone the STS refuses it.
	if code := exchange(t, okToken); code != http.StatusOK {
		t.Fatalf("the running pod's token was refused (%d) before its pod was deleted", code)
	}
	deleteNow(t, okPod)
	deleteNow(t, deniedPod)
	deadline := time.Now().Add(60 * time.Second)
	for exchange(t, okToken) == http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the STS still accepts the token of a deleted pod")
		}
		time.Sleep(time.Second)
	}
}

// jobPods lists the names of the Job's pods, oldest first.
func jobPods(t *testing.T, job string) []string {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "job-name=" + job})
	if err != nil {
		t.Fatalf("pods of job %s: %v", job, err)
	}
	sort.Slice(l.Items, func(a, b int) bool { return l.Items[a].CreationTimestamp.Before(&l.Items[b].CreationTimestamp) })
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out
}

// testAccessGrantedLater: a Job whose service account has no access to the bucket yet (the
// IAM binding made after the Job, or still propagating) fails its first pod fast, with an
// Event naming volume, bucket and identity; once access is granted, the Job's next pod
// mounts and writes, and the Job completes: nothing to recreate or edit. gcsfuse does not
// retry a start it was refused, so recovery is the Job's retry (backoffLimit), not the
// failed pod's.
func testAccessGrantedLater(t *testing.T) {
	t.Parallel()
	identity := createServiceAccount(t, "wif-late")
	bucket := newBucket(t)
	setPolicy(t, bucket, "system:serviceaccount:"+ns+":someone-else")
	name := podName(t, "")
	ann, spec := podTemplate(podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, serviceAccount: "wif-late", grace: ptr(int64(5)),
		attrs:   map[string]string{contract.AttrWorkloadIdentityProvider: localProvider},
		volumes: []volume{{"bucket", bucket, mountPath}},
		args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(mib)},
	})
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: batchv1.JobSpec{
		BackoffLimit: ptr(int32(3)),
		Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: ann}, Spec: spec},
	}}
	if _, err := cs.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create job: %v", err)
	}
	var first string
	deadline := time.Now().Add(60 * time.Second)
	for first == "" && time.Now().Before(deadline) {
		if pods := jobPods(t, name); len(pods) > 0 {
			first = pods[0]
		}
		time.Sleep(200 * time.Millisecond)
	}
	if first == "" {
		t.Fatalf("job %s made no pod in 60 s", name)
	}
	e := waitEvent(t, first, 60*time.Second, regexp.MustCompile(`^`+contract.EventGcsfuseFailed+`$`), "volume bucket", bucket, identity, "403")
	t.Logf("before access: %s", e.Message)
	granted := time.Now()
	setPolicy(t, bucket, identity)
	if cond, _ := waitJob(t, name, 180*time.Second); cond != batchv1.JobComplete {
		t.Fatalf("job %s: %s after access was granted, want Complete; pods %v\n%s", name, cond, jobPods(t, name), podEvents(first))
	}
	record(t, "access granted -> Job complete", granted, time.Now())
	pods := jobPods(t, name)
	if len(pods) < 2 {
		t.Fatalf("job completed with pods %v: the pod refused access should have failed", pods)
	}
	if p, err := cs.CoreV1().Pods(ns).Get(context.Background(), first, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodFailed {
		t.Fatalf("the pod refused access: %v, want Failed\n%s", err, describe(p))
	}
	for _, p := range pods {
		keepSidecarLog(p)
	}
	expectObject(t, bucket, "out.bin", mib)
}

// testSecretKey: a service account key in a Secret (nodePublishSecretRef, resolved by the
// kubelet in the pod's namespace) writes the bucket; a Secret without the key fails the
// mount with an Event that says what to fix.
func testSecretKey(t *testing.T) {
	t.Parallel()
	email := "e2e-key-writer@emulator-project.iam.gserviceaccount.com"
	key := admin(t, http.MethodPost, "serviceaccounts", map[string]string{"email": email})
	ctx := context.Background()
	for name, data := range map[string]map[string][]byte{"gcs-key": {contract.SecretKeyServiceAccount: key}, "not-a-key": {"password": []byte("x")}} {
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bucket := newBucket(t)
	setPolicy(t, bucket, "serviceAccount:"+email)
	pod := podName(t, "key")
	createPod(t, pod, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, secret: "gcs-key",
		volumes: []volume{{"bucket", bucket, mountPath}},
		args:    []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(2 * mib), "-then", "5s"},
	})
	running := waitPod(t, pod, startWithin, "running its app", appRunning)
	files := hostFiles(running)
	checkOwned(t, files.CredentialsDir("bucket"), 0o700)
	checkOwned(t, files.CredentialsConfigFile("bucket"), 0o600)
	p := waitPod(t, pod, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: %s\n%s\n%s", pod, p.Status.Phase, describe(p), podEvents(pod))
	}
	expectObject(t, bucket, "out.bin", 2*mib)
	deleteNow(t, pod)

	bad := podName(t, "missing-key")
	createPod(t, bad, podOpts{
		mode: credMode(), restart: corev1.RestartPolicyNever, secret: "not-a-key",
		volumes: []volume{{"bucket", bucket, mountPath}},
		args:    []string{"write", "-dir", mountPath, "-name", "never.bin", "-bytes", "1"},
	})
	e := waitEvent(t, bad, 60*time.Second, regexp.MustCompile(`^FailedMount$`), "volume bucket", bucket, `no key "key.json"`)
	t.Logf("event: %s", e.Message)
	deleteNow(t, bad)
}

// testSecretKeyPV: the same key on a PersistentVolume, whose nodePublishSecretRef names the
// Secret's namespace; the pod mounts it through a claim.
func testSecretKeyPV(t *testing.T) {
	t.Parallel()
	email := "e2e-pv-writer@emulator-project.iam.gserviceaccount.com"
	key := admin(t, http.MethodPost, "serviceaccounts", map[string]string{"email": email})
	ctx := context.Background()
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gcs-pv-key"},
		Data: map[string][]byte{contract.SecretKeyServiceAccount: key}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bucket := newBucket(t)
	setPolicy(t, bucket, "serviceAccount:"+email)
	pvName := bucket // cluster-scoped: unique per run like the bucket
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		StorageClassName:              "",
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: contract.DriverName, VolumeHandle: bucket,
			NodePublishSecretRef: &corev1.SecretReference{Name: "gcs-pv-key", Namespace: ns},
		}},
	}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "key-claim"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: &empty, VolumeName: pvName,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
	}}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name := podName(t, "")
	ann, spec := podTemplate(podOpts{mode: credMode(), restart: corev1.RestartPolicyNever,
		args: []string{"write", "-dir", mountPath, "-name", "out.bin", "-bytes", strconv.Itoa(mib)}})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "bucket", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "key-claim"}}})
	spec.Containers[0].VolumeMounts = mounts([]volume{{"bucket", bucket, mountPath}})
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, name, terminalWithin, "terminal", terminal)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: %s\n%s\n%s", name, p.Status.Phase, describe(p), podEvents(name))
	}
	expectObject(t, bucket, "out.bin", mib)
	deleteNow(t, name)
}

// testRefresh: a pod reads and writes through federation for 75 s, more than two
// lifetimes of the emulator's 30-second access tokens and seven of the kubelet's republish
// periods (syncFrequency 10 s in hack/cluster-up.sh): every republish succeeds, gcsfuse
// exchanges the token file again whenever its access token runs out, and no request fails.
// Shared, the volume is the node's mounter's, and each republish rewrites the sharing key's
// token file.
func testRefresh(t *testing.T, shared bool) {
	t.Parallel()
	sa, mode := "wif-long", credMode()
	attrs := map[string]string{contract.AttrWorkloadIdentityProvider: localProvider}
	if shared {
		sa, mode = "wif-long-shared", "" // no sidecar: the node's mounter serves it
		attrs[contract.AttrMountMode] = contract.MountModeShared
	}
	identity := createServiceAccount(t, sa)
	bucket := newBucket(t)
	setPolicy(t, bucket, identity)
	const readSize = 64 << 10
	uploadPoliced(t, bucket, "input.bin", readSize)
	pod := podName(t, "")
	const every, runFor = 5 * time.Second, 75 * time.Second
	createPod(t, pod, podOpts{
		mode: mode, restart: corev1.RestartPolicyNever, serviceAccount: sa,
		attrs:   attrs,
		volumes: []volume{{"bucket", bucket, mountPath}},
		args: []string{"loop", "-dir", mountPath, "-prefix", "p", "-bytes", strconv.Itoa(readSize), "-every", every.String(), "-for", runFor.String(),
			"-read", "input.bin", "-read-bytes", strconv.Itoa(readSize)},
	})
	p := waitPod(t, pod, runFor+3*time.Minute, "terminal", terminal)
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s: %s\n%s\napp log:\n%s\n%s", pod, p.Status.Phase, describe(p), logs(pod, appContainer), podEvents(pod))
	}
	objs := objects(t, bucket)
	n := 0
	for name := range objs {
		if strings.HasPrefix(name, "p-") {
			n++
		}
	}
	if want := int(runFor/every) - 2; n < want {
		t.Fatalf("%d files written over %s, want at least %d", n, runFor, want)
	}
	for i := 0; i < n; i++ {
		expectObject(t, bucket, "p-"+strconv.Itoa(i), readSize)
	}
	reads := strings.Count(logs(pod, appContainer), "read input.bin at")
	// The emulator logs each access token it issues: more than one for this identity means
	// gcsfuse exchanged the pod's token again when the first access token ran out.
	issuedTo := strings.Count(emulatorLog(t), `msg="access token issued" identity=`+identity+" ")
	if issuedTo < 2 {
		t.Errorf("the emulator issued %d access tokens to %s over %s of 30-second tokens: gcsfuse never refreshed", issuedTo, identity, runFor)
	}
	republished := strings.Count(nodePluginLog(t), `podUID=`+string(p.UID)) // every line the node plugin logged about this pod's volume
	t.Logf("%d files written and %d reads over %s; %d access tokens issued to %s; %d node plugin log lines for the pod (republishes included)",
		n, reads, runFor, issuedTo, identity, republished)
	// The kubelet's own token request refused by the node authorizer before its graph has the
	// pod on the node ("no relationship found", under load at the pod's start) fails a mount
	// before the driver is called, and the kubelet tries again: not a republish of ours.
	ev := podEvents(pod)
	for _, l := range strings.Split(ev, "\n") {
		if strings.Contains(l, "FailedMount") && !(strings.Contains(l, "failed to fetch token") && strings.Contains(l, "no relationship found between node")) {
			t.Errorf("a republish failed:\n%s", ev)
			break
		}
	}
	deleteNow(t, pod)
}

// componentLog is the log of the first pod with the label in the driver's namespace.
func componentLog(t *testing.T, selector string) string {
	t.Helper()
	ctx := context.Background()
	pods, err := cs.CoreV1().Pods("gcsfuse-csi").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods %s: %v", selector, err)
	}
	// A DaemonSet's pod on the primary node, where the tests' pods run.
	pod := pods.Items[0]
	for _, p := range pods.Items {
		if p.Spec.NodeName == primaryNode {
			pod = p
			break
		}
	}
	return podLog(t, pod.Name)
}

// podLog is the log of a pod of the driver's namespace.
func podLog(t *testing.T, name string) string {
	t.Helper()
	b, err := cs.CoreV1().Pods("gcsfuse-csi").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	return string(b)
}

func emulatorLog(t *testing.T) string   { return componentLog(t, "app=gcs-emulator") }
func nodePluginLog(t *testing.T) string { return componentLog(t, "app=gcsfuse-csi-node") }

// checkNoSecrets greps every log, Event and process flag of the driver for the secrets the
// emulator issued or received.
func checkNoSecrets(t *testing.T) {
	var issued []string
	if err := json.Unmarshal(admin(t, http.MethodGet, "issued", nil), &issued); err != nil || len(issued) == 0 {
		t.Fatalf("the emulator issued nothing (%v): the check would prove nothing", err)
	}
	ctx := context.Background()
	sources := map[string]string{}
	for _, sel := range []string{"app=gcsfuse-csi-node", "app=gcsfuse-webhook"} {
		pods, err := cs.CoreV1().Pods("gcsfuse-csi").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil || len(pods.Items) == 0 {
			t.Fatalf("pods %s: %v", sel, err)
		}
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				b, err := cs.CoreV1().Pods("gcsfuse-csi").GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
				if err != nil {
					t.Fatalf("logs of %s/%s: %v", p.Name, c.Name, err)
				}
				sources["log of "+p.Name+"/"+c.Name] = string(b)
				spec, _ := json.Marshal(c)
				sources["spec of "+p.Name+"/"+c.Name] = string(spec)
			}
		}
	}
	sidecarLogsMu.Lock()
	sources["sidecar logs"] = strings.Join(sidecarLogs, "\n")
	sidecarLogsMu.Unlock()
	ev, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var evs strings.Builder
	for _, e := range ev.Items {
		fmt.Fprintf(&evs, "%s %s\n", e.Reason, e.Message)
	}
	sources["events"] = evs.String()
	var flags strings.Builder
	for _, pid := range testenv.ProcessPIDs(func(args []string) bool {
		base := filepath.Base(args[0])
		return base == "gcsfuse" || base == "gcsfuse-sidecar" || base == "gcsfuse-csi-node" || base == "gcsfuse-webhook"
	}) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		flags.Write(b)
		flags.WriteByte('\n')
	}
	sources["driver process flags"] = flags.String()
	checked := 0
	for _, s := range issued {
		for _, part := range secretscan.Parts(s) {
			checked++
			for name, text := range sources {
				if strings.Contains(text, part) {
					t.Errorf("%s contains a secret the emulator issued or received (%d bytes)", name, len(s))
				}
			}
		}
	}
	t.Logf("%d secrets (%d parts) checked against %d sources (%d bytes)", len(issued), checked, len(sources), totalLen(sources))
}

func totalLen(m map[string]string) int {
	n := 0
	for _, s := range m {
		n += len(s)
	}
	return n
}
