package integration

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/testpki"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/testproxy"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/netconf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// proxiedHost is the emulator's name in these tests. Only the test's proxy resolves it, so a
// request of gcsfuse's that does not go through the proxy cannot reach the emulator at all.
// (The emulator listens on 127.0.0.1, and Go never proxies a request to a loopback IP or
// "localhost", whatever HTTPS_PROXY says: the endpoint must be a name.) It ends in .onion,
// which Go's resolver never sends to DNS (RFC 7686; gcsfuse is built without cgo), so such a
// request fails at once and nothing leaves the machine.
const proxiedHost = "storage.gcsfuse-test.onion"

// testProxy is the tests' proxy (internal/testing/testproxy) on a free loopback port, resolving
// proxiedHost to the emulator's loopback address and refusing every other target (it
// reaches nothing else); with refuse it answers 403 to everything.
type testProxy struct {
	*testproxy.Proxy
	URL string
}

func startProxy(t *testing.T, to string, refuse bool) *testProxy {
	t.Helper()
	p := &testProxy{Proxy: &testproxy.Proxy{Resolve: func(hostport string) (string, bool) {
		h, _, err := net.SplitHostPort(hostport)
		return to, err == nil && h == proxiedHost
	}}}
	p.SetRefuse(refuse)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.URL = "http://" + ln.Addr().String()
	srv := &http.Server{Handler: p.Proxy, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }() // closed by the cleanup
	t.Cleanup(func() { srv.Close() })
	return p
}

// proxiedEmulator starts an emulator on 127.0.0.1 that calls itself proxiedHost (over TLS
// with tlsCfg), with bucket.
func proxiedEmulator(t *testing.T, tlsCfg *tls.Config, bucket string) *emulator.Server {
	t.Helper()
	e, err := emulator.StartWith(emulator.Options{Host: "127.0.0.1", PublicHost: proxiedHost, TLS: tlsCfg, Buckets: []string{bucket}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

func listenAddr(e *emulator.Server) string {
	return "127.0.0.1:" + e.URL[strings.LastIndex(e.URL, ":")+1:]
}

// proxyEnv is a node plugin configured with the proxy and CA, its Events and its log.
func proxyEnv(t *testing.T, e *emulator.Server, proxy netconf.Proxy, ca []byte) (*testenv.Env, *events) {
	t.Helper()
	ev := &events{}
	env, err := testenv.New(testenv.Options{Emulator: e, SidecarBin: sidecarBin, Log: testLogger(t), Events: ev, Proxy: proxy, CABundle: ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env, ev
}

// writeAndRead writes a file through the mount, reads back one the test uploaded, and checks
// the bucket got the write.
func writeAndRead(t *testing.T, e *emulator.Server, bucket, mnt string) {
	t.Helper()
	data := randomBytes(t, 300<<10)
	if err := os.WriteFile(filepath.Join(mnt, "written.bin"), data, 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	requireObjectIn(t, e, bucket, "written.bin", data)
	e.CreateObject(fakestorageObject(bucket, "uploaded.txt", "from the bucket"))
	got, err := os.ReadFile(filepath.Join(mnt, "uploaded.txt"))
	if err != nil || string(got) != "from the bucket" {
		t.Fatalf("read through the mount: %q, %v", got, err)
	}
}

// TestProxyCarriesGcsfuseTraffic: with --http-proxy, gcsfuse reaches an http:// endpoint
// that only the proxy can resolve, for the bucket check, its listings, the upload of a
// written file and the read of an object; with a proxy that refuses, the volume fails with
// an Event that names the proxy.
func TestProxyCarriesGcsfuseTraffic(t *testing.T) {
	const bucket = "proxied"
	e := proxiedEmulator(t, nil, bucket)
	if !strings.HasPrefix(e.Endpoint, "http://"+proxiedHost+":") {
		t.Fatalf("emulator endpoint %s", e.Endpoint)
	}
	px := startProxy(t, listenAddr(e), false)
	env, _ := proxyEnv(t, e, netconf.Proxy{HTTP: px.URL}, nil)
	_, sc, mnt := mountedWith(t, env, contract.ModeNative, bucket, withMachineType)
	writeAndRead(t, e, bucket, mnt)

	var uploads, reads, other int
	for _, r := range px.Requests() {
		switch {
		case !strings.Contains(r, "://"+proxiedHost+":"):
			t.Errorf("the proxy saw a request for another host: %s", r)
		case strings.HasPrefix(r, "POST ") && strings.Contains(r, "/upload/storage/v1/b/"+bucket+"/o"):
			uploads++
		case strings.HasPrefix(r, "GET ") && strings.Contains(r, "/"+bucket+"/uploaded.txt?generation="):
			reads++
		default:
			other++
		}
	}
	t.Logf("through the proxy: %d uploads, %d object reads, %d other requests", uploads, reads, other)
	if uploads == 0 || reads == 0 || other < 2 {
		t.Errorf("gcsfuse's traffic did not all cross the proxy: %d uploads, %d reads, %d other; requests: %q", uploads, reads, other, px.Requests())
	}
	if !strings.Contains(sc.Output(), "proxy=\"http=http://127.0.0.1:") {
		t.Errorf("the sidecar does not log the volume's proxy:\n%s", sc.Output())
	}

	// The same, through a proxy that refuses every request.
	refusing := startProxy(t, listenAddr(e), true)
	env2, ev := proxyEnv(t, e, netconf.Proxy{HTTP: strings.Replace(refusing.URL, "http://", "http://ops:hunter22@", 1)}, nil)
	failedPod, err := env2.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := failedPod.PublishReq(ctx(t), failedPod.PublishRequest("data", bucket, "", false)); err != nil {
		t.Fatal(err)
	}
	sc2, err := failedPod.StartSidecar(contract.ModeNative, 30, echo(t))
	if err != nil {
		t.Fatal(err)
	}
	msg := ev.wait(t, contract.EventGcsfuseFailed, 20*time.Second)
	if !strings.Contains(msg, "through proxy http://REDACTED@127.0.0.1:") || !strings.Contains(msg, "403") && !strings.Contains(msg, "Forbidden") {
		t.Errorf("the failure does not name the refusing proxy: %s", msg)
	}
	if strings.Contains(msg, "hunter22") || strings.Contains(sc2.Output(), "hunter22") {
		t.Errorf("the proxy's password was shown: %s\n%s", msg, sc2.Output())
	}
	if len(refusing.Requests()) == 0 {
		t.Error("the refusing proxy saw no request")
	}
}

// TestExtraCATrustsTheEmulatorsTLS: an emulator serving HTTPS with a certificate of a CA
// the system does not know, reached by name through a CONNECT proxy. With --ca-bundle-file
// naming that CA, gcsfuse mounts, writes and reads; without it, the volume fails with
// an Event naming the x509 error.
func TestExtraCATrustsTheEmulatorsTLS(t *testing.T) {
	const bucket = "tls"
	caPEM, serverCert := testCA(t, proxiedHost)
	e := proxiedEmulator(t, &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}, bucket)
	if !strings.HasPrefix(e.Endpoint, "https://"+proxiedHost+":") {
		t.Fatalf("emulator endpoint %s", e.Endpoint)
	}
	px := startProxy(t, listenAddr(e), false)
	proxy := netconf.Proxy{HTTPS: px.URL}

	env, _ := proxyEnv(t, e, proxy, caPEM)
	pod, _, mnt := mountedWith(t, env, contract.ModeNative, bucket, withMachineType)
	writeAndRead(t, e, bucket, mnt)
	bundle, err := os.ReadFile(podfiles.At(pod.TmpDir).CombinedCAFile("data"))
	if err != nil || !bytes.HasSuffix(bundle, caPEM) || len(bundle) <= len(caPEM) {
		t.Errorf("gcsfuse's bundle is not the system roots and the extra CA (%d bytes, %v)", len(bundle), err)
	}
	connects := 0
	for _, r := range px.Requests() {
		if r == "CONNECT "+listenHostPort(e) {
			connects++
		}
	}
	if connects == 0 {
		t.Errorf("no CONNECT to %s through the proxy: %q", listenHostPort(e), px.Requests())
	}

	env2, ev := proxyEnv(t, e, proxy, nil)
	bad, err := env2.NewPod()
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.PublishReq(ctx(t), bad.PublishRequest("data", bucket, "", false)); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.StartSidecar(contract.ModeNative, 30, echo(t)); err != nil {
		t.Fatal(err)
	}
	msg := ev.wait(t, contract.EventGcsfuseFailed, 20*time.Second)
	if !strings.Contains(msg, "x509: certificate signed by unknown authority") {
		t.Errorf("without the CA: %s, want the x509 error", msg)
	}
}

// withMachineType gives gcsfuse its machine type, as a node plugin on a cluster does: it
// asks the metadata server otherwise, which is not this test's subject.
func withMachineType(req *csi.NodePublishVolumeRequest) {
	req.VolumeContext[contract.AttrMountOptions] = "machine-type=n2-standard-4"
}

// listenHostPort is the emulator's public name and port, what a CONNECT asks for.
func listenHostPort(e *emulator.Server) string {
	return proxiedHost + ":" + e.URL[strings.LastIndex(e.URL, ":")+1:]
}

// testCA makes a CA and a server certificate it signed for host (internal/testing/testpki).
func testCA(t *testing.T, host string) ([]byte, tls.Certificate) {
	t.Helper()
	issued, err := testpki.Issue("gcsfuse-csi test CA", host, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := issued.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return issued.CAPEM, cert
}
