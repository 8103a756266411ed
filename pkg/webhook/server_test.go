package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

// selfSigned writes a self-signed serving certificate for 127.0.0.1 and returns the paths
// of the cert and key files and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	certPEM, keyPEM, cert := newPair(t, 1)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	replaceFile(t, certFile, certPEM)
	replaceFile(t, keyFile, keyPEM)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// newPair makes a self-signed serving certificate for 127.0.0.1 with serial, valid from an
// hour ago to an hour from now.
func newPair(t *testing.T, serial int64) (certPEM, keyPEM []byte, cert *x509.Certificate) {
	t.Helper()
	return newPairValid(t, serial, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
}

// newPairValid is newPair valid from notBefore to notAfter.
func newPairValid(t *testing.T, serial int64, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: "gcsfuse-webhook.test"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), cert
}

// replaceFile writes data to path atomically, as a Secret volume update does.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// A rotated serving certificate is served from the next handshake on, without a restart;
// a half-done rotation (new certificate, old key) keeps the previous pair serving.
func TestServerReloadsARotatedCertificate(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	srv, err := NewServer(ServerConfig{CertFile: certFile, KeyFile: keyFile, ShutdownTimeout: 5 * time.Second,
		CertCheckInterval: time.Nanosecond}, NewMux(newMutator(t, modern), nil), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	ln, cancel, done := serveLoopback(t, srv)
	defer func() { cancel(); <-done }()

	certPEM, keyPEM, cert2 := newPair(t, 2)
	pool.AddCert(cert2)
	serial := func() int64 {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 1 {
		t.Fatalf("serving serial %d, want 1", s)
	}
	replaceFile(t, certFile, certPEM) // the key still belongs to the old certificate
	if s := serial(); s != 1 {
		t.Fatalf("half-rotated pair: serving serial %d, want the previous pair (1)", s)
	}
	replaceFile(t, keyFile, keyPEM)
	if s := serial(); s != 2 {
		t.Fatalf("after the rotation: serving serial %d, want 2", s)
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if s := serial(); s != 2 {
		t.Fatalf("key file gone: serving serial %d, want the loaded pair (2)", s)
	}
}

func TestServerTLS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	var ready atomic.Bool
	m := newMutator(t, modern)
	srv, err := NewServer(ServerConfig{CertFile: certFile, KeyFile: keyFile, ShutdownTimeout: 5 * time.Second},
		NewMux(m, ready.Load), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	ln, cancel, done := serveLoopback(t, srv)
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after cancel")
		}
	}()

	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	defer client.CloseIdleConnections()
	base := "https://" + ln.Addr().String()

	get := func(path string) int {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer func() { _ = resp.Body.Close() }()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := get(PathHealthz); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	if code := get(PathReadyz); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before ready = %d, want 503", code)
	}
	ready.Store(true)
	if code := get(PathReadyz); code != http.StatusOK {
		t.Errorf("/readyz when ready = %d", code)
	}

	raw := mustJSON(t, newPod())
	resp, err := client.Post(base+PathInject, "application/json", bytes.NewReader(reviewBody(t, createRequest(t, raw))))
	if err != nil {
		t.Fatalf("POST %s: %v", PathInject, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: HTTP %d", PathInject, resp.StatusCode)
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(resp.Body).Decode(review); err != nil {
		t.Fatal(err)
	}
	if review.Response == nil || review.Response.UID != "uid-1" || !review.Response.Allowed {
		t.Fatalf("response = %+v", review.Response)
	}
	patched, err := applyPatch(raw, review.Response.Patch)
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	_, pod := admitRaw(t, m, patched) // and the patched pod is left alone
	assertMode(t, pod, true)

	// A client that does not trust the certificate cannot talk to the server.
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + PathHealthz); err == nil {
		t.Error("a client without the CA got through")
	}
}

func TestNewServerBadKeyPair(t *testing.T) {
	certFile, _, _ := selfSigned(t)
	if _, err := NewServer(ServerConfig{CertFile: certFile, KeyFile: filepath.Join(t.TempDir(), "missing")}, http.NewServeMux(), nil); err == nil {
		t.Error("a missing key was accepted")
	}
}

func TestServeReturnsListenerErrors(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t)
	srv, err := NewServer(ServerConfig{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile}, http.NewServeMux(), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
	if err := srv.Serve(context.Background(), ln); err == nil {
		t.Error("Serve on a closed listener returned nil")
	}
}

// Readiness follows the certificate served: a replica whose rotated-in certificate has
// expired is not ready (the Service stops sending it admissions it would fail), and is
// ready again once a valid one replaces it, without a restart.
func TestServerReadyFollowsTheCertificate(t *testing.T) {
	certFile, keyFile, _ := selfSigned(t)
	srv, err := NewServer(ServerConfig{CertFile: certFile, KeyFile: keyFile, CertCheckInterval: time.Nanosecond},
		http.NewServeMux(), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	if !srv.Ready() {
		t.Fatal("not ready with a valid certificate")
	}
	certPEM, keyPEM, _ := newPairValid(t, 2, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	replaceFile(t, certFile, certPEM)
	replaceFile(t, keyFile, keyPEM)
	if srv.Ready() {
		t.Error("ready with an expired certificate")
	}
	certPEM, keyPEM, _ = newPair(t, 3)
	replaceFile(t, certFile, certPEM)
	replaceFile(t, keyFile, keyPEM)
	if !srv.Ready() {
		t.Error("not ready again after a valid certificate was rotated in")
	}
}

// A stopping server turns not ready at once but keeps answering, new connections
// included, for ShutdownDelay: the admissions the Service still routes to it while it
// drops the replica succeed.
func TestServerServesThroughTheShutdownDelay(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	const delay = time.Second
	srv, err := NewServer(ServerConfig{CertFile: certFile, KeyFile: keyFile, ShutdownTimeout: 5 * time.Second, ShutdownDelay: delay},
		NewMux(http.NotFoundHandler(), nil), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	ln, cancel, done := serveLoopback(t, srv)
	healthz := func() error {
		// A new connection each time, as a Service proxy switching replicas makes.
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true}
		resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Get("https://" + ln.Addr().String() + PathHealthz)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	if err := healthz(); err != nil || !srv.Ready() {
		t.Fatalf("before stopping: healthz %v, ready %v", err, srv.Ready())
	}
	stopped := time.Now()
	cancel()
	time.Sleep(delay / 4)
	if srv.Ready() {
		t.Error("ready while shutting down")
	}
	if err := healthz(); err != nil {
		t.Errorf("a new connection during the shutdown delay: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if took := time.Since(stopped); took < delay {
		t.Errorf("Serve returned %s after the stop, before the %s delay", took, delay)
	}
	if err := healthz(); err == nil {
		t.Error("still accepting after Serve returned")
	}
}

// A stopping server retires each keep-alive connection after its next answer during
// ShutdownDelay ("Connection: close"), so that the connections the API server keeps to it
// are closed by a response rather than at Shutdown, under a request the API server would
// never retry (an EOF admission refuses the pod).
func TestServerRetiresKeepAliveConnectionsWhileDraining(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	srv, err := NewServer(ServerConfig{CertFile: certFile, KeyFile: keyFile, ShutdownTimeout: 5 * time.Second, ShutdownDelay: 2 * time.Second},
		NewMux(http.NotFoundHandler(), nil), discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	ln, cancel, done := serveLoopback(t, srv)
	defer func() { cancel(); <-done }()
	client := &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	// get answers whether the connection was reused and whether the server closes it.
	get := func() (reused, closing bool) {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet,
			"https://"+ln.Addr().String()+PathHealthz, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return reused, resp.Close
	}
	get()
	if reused, closing := get(); !reused || closing {
		t.Fatalf("serving: reused %v, closing %v; want a kept-alive connection", reused, closing)
	}
	cancel()
	for !srv.draining.Load() {
		time.Sleep(time.Millisecond)
	}
	if reused, closing := get(); !reused || !closing {
		t.Errorf("draining, on the kept-alive connection: reused %v, closing %v; want it answered, then closed", reused, closing)
	}
	if reused, closing := get(); reused || !closing {
		t.Errorf("draining, the next request: reused %v, closing %v; want a new connection, closed after its answer", reused, closing)
	}
}

// serveLoopback runs srv on a free port of 127.0.0.1 until cancel; done gets Serve's result.
func serveLoopback(t *testing.T, srv *Server) (ln net.Listener, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	return ln, cancel, served
}
