package sidecar

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/testpki"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/testproxy"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/handoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// direct is the route of a volume without proxy or CA.
var direct = &route{client: http.DefaultClient}

// testCA is a CA and a server certificate it signed for host (a name or an IP).
type testCA struct {
	pem  []byte
	cert tls.Certificate
}

func newTestCA(t *testing.T, host string) *testCA {
	t.Helper()
	issued, err := testpki.Issue("test CA", host, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := issued.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{pem: issued.CAPEM, cert: cert}
}

// volumeWithCA lays out the node plugin's CA file for volume data in a temp emptyDir.
func volumeWithCA(t *testing.T, extra []byte) (*handoff.Volume, string) {
	t.Helper()
	tmp := t.TempDir()
	if err := os.MkdirAll(podfiles.At(tmp).CredentialsDir("data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podfiles.At(tmp).CABundleFile("data"), extra, 0o600); err != nil {
		t.Fatal(err)
	}
	return &handoff.Volume{Version: handoff.VersionNetwork, VolumeName: "data", Bucket: "b", CABundle: true}, tmp
}

// gcsfuse's environment: the proxy variables and SSL_CERT_FILE naming a bundle of the
// system's roots and the extra CA, and nothing of the sidecar's own environment.
func TestGcsfuseEnvAndBundle(t *testing.T) {
	ca := newTestCA(t, "gcs.corp")
	v, tmp := volumeWithCA(t, ca.pem)
	v.HTTPSProxy, v.NoProxy = "http://u:pw@proxy:3128", ".svc"
	system := filepath.Join(t.TempDir(), "system.crt")
	sysCA := newTestCA(t, "x")
	if err := os.WriteFile(system, sysCA.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HTTPS_PROXY", "http://sidecar-own:1")
	r, err := routeFor(v, tmp, system)
	if err != nil {
		t.Fatal(err)
	}
	want := podfiles.At(tmp).CombinedCAFile("data")
	env := gcsfuseEnv("/t", r)
	for _, kv := range []string{"PATH=/usr/bin:/bin", "TMPDIR=/t", "HOME=/t", "HTTPS_PROXY=http://u:pw@proxy:3128", "NO_PROXY=.svc," + netconf.AlwaysDirect, "SSL_CERT_FILE=" + want} {
		if !slices.Contains(env, kv) {
			t.Errorf("gcsfuse env %q lacks %s", env, kv)
		}
	}
	if len(env) != 6 || slices.ContainsFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, "HTTP_PROXY=") || strings.Contains(kv, "sidecar-own")
	}) {
		t.Errorf("gcsfuse env %q has more than its own", env)
	}
	b, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, sysCA.pem) || !bytes.HasSuffix(b, ca.pem) {
		t.Errorf("the bundle is not the system's roots then the extra CA:\n%s", b)
	}
	if st, _ := os.Stat(want); st.Mode().Perm() != 0o600 {
		t.Errorf("bundle mode %v", st.Mode())
	}
	// Without system roots (an image without them) the extra CA alone; no proxy, no CA:
	// nothing added.
	if r, err := routeFor(v, tmp, filepath.Join(t.TempDir(), "none")); err != nil {
		t.Fatal(err)
	} else if b, _ := os.ReadFile(r.bundle); !bytes.Equal(b, ca.pem) {
		t.Errorf("bundle without system roots: %q", b)
	}
	plain, err := routeFor(&handoff.Volume{VolumeName: "data", Bucket: "b"}, tmp, system)
	if err != nil {
		t.Fatal(err)
	}
	if env := gcsfuseEnv("/t", plain); len(env) != 3 {
		t.Errorf("gcsfuse env of a plain volume: %q", env)
	}
}

// A missing or bad CA file fails the volume, naming it.
func TestRouteRefusesABadBundle(t *testing.T) {
	v, tmp := volumeWithCA(t, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	if _, err := routeFor(v, tmp, DefaultSystemRoots); err == nil || !strings.Contains(err.Error(), "CA bundle for volume data") || strings.Contains(err.Error(), "AAAA") {
		t.Errorf("a private key as CA bundle: %v", err)
	}
	if err := os.Remove(podfiles.At(tmp).CABundleFile("data")); err != nil {
		t.Fatal(err)
	}
	if _, err := routeFor(v, tmp, DefaultSystemRoots); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("no CA file: %v", err)
	}
}

// The bucket check goes gcsfuse's way: through the proxy (CONNECT to the endpoint's name,
// which only the proxy resolves), trusting the extra CA; a refusing proxy and a missing CA
// fail it with messages that name the cause, never the proxy's password.
func TestCheckBucketThroughProxyWithCA(t *testing.T) {
	const host = "storage.proxy.test"
	ca := newTestCA(t, host)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/storage/v1/b/there" {
			_, _ = io.WriteString(w, `{"name":"there"}`)
			return
		}
		http.NotFound(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.cert}}
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	endpoint := "https://" + host + ":" + port + "/storage/v1/"

	to := srv.Listener.Addr().String()
	px := &testproxy.Proxy{Resolve: func(string) (string, bool) { return to, true }} // plays the proxy's name resolution
	ps := httptest.NewServer(px)
	defer ps.Close()
	proxyURL := strings.Replace(ps.URL, "http://", "http://alice:pr0xy-pw@", 1)

	v, tmp := volumeWithCA(t, ca.pem)
	v.HTTPSProxy = proxyURL
	r, err := routeFor(v, tmp, DefaultSystemRoots)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkBucket(context.Background(), preflightTimeout, r, endpoint, "there", "", ""); err != nil {
		t.Fatalf("through the proxy with the CA: %v", err)
	}
	got := px.Requests()
	if len(got) == 0 || got[0] != "CONNECT "+host+":"+port {
		t.Fatalf("the proxy saw %q, want a CONNECT to %s:%s", got, host, port)
	}

	noCA := &handoff.Volume{Version: handoff.VersionNetwork, VolumeName: "data", Bucket: "b", HTTPSProxy: proxyURL}
	r2, err := routeFor(noCA, tmp, DefaultSystemRoots)
	if err != nil {
		t.Fatal(err)
	}
	err = checkBucket(context.Background(), preflightTimeout, r2, endpoint, "there", "", "")
	if err == nil || !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
		t.Errorf("without the CA: %v, want an x509 error", err)
	}
	if errors.As(err, new(transientError)) {
		t.Errorf("an unknown CA is taken for a failure that a retry may not see: %v", err)
	}

	px.SetRefuse(true)
	r.close() // a route serves one check: no tunnel kept from the first
	err = checkBucket(context.Background(), preflightTimeout, r, endpoint, "there", "", "")
	if err == nil || !strings.Contains(err.Error(), "unreachable through proxy http://REDACTED@127.0.0.1:") || !strings.Contains(err.Error(), "Forbidden") {
		t.Errorf("refused by the proxy: %v", err)
	}
	if errors.As(err, new(transientError)) {
		t.Errorf("a proxy's refusal is taken for a failure that a retry may not see: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), "pr0xy-pw") {
		t.Errorf("the error shows the proxy's password: %v", err)
	}
}
