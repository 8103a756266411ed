package netconf

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"
)

const secret = "s3cr3t-pw"

func TestValidateProxy(t *testing.T) {
	good := []Proxy{
		{},
		{HTTPS: "http://proxy.corp:3128"},
		{HTTPS: "http://alice:" + secret + "@proxy.corp:3128/", HTTP: "http://10.0.0.1:8080", NoProxy: "localhost,.svc,10.0.0.0/8, 169.254.169.254,[fd00::1]:443,*"},
		{HTTPS: "https://proxy.corp", NoProxy: "metadata.google.internal"},
		{HTTPS: "socks5h://proxy.corp:1080"},
	}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("%v refused: %v", p, err)
		}
	}
	bad := map[string]Proxy{
		"no scheme":            {HTTPS: "proxy.corp:3128"},
		"ftp":                  {HTTPS: "ftp://proxy.corp"},
		"no host":              {HTTPS: "http://:3128"},
		"path":                 {HTTPS: "http://proxy.corp:3128/x"},
		"query":                {HTTP: "http://proxy.corp:3128?a=b"},
		"port":                 {HTTPS: "http://proxy.corp:99999"},
		"space":                {HTTPS: "http://proxy corp"},
		"newline":              {HTTPS: "http://proxy\n.corp"},
		"unparsable":           {HTTPS: "http://alice:" + secret + "@[::1"},
		"no-proxy entry":       {HTTPS: "http://p:1", NoProxy: "a b"},
		"no-proxy quote":       {HTTPS: "http://p:1", NoProxy: `"x"`},
		"no-proxy alone":       {NoProxy: "localhost"},
		"too long":             {HTTPS: "http://p:1/" + strings.Repeat("a", MaxProxyURL)},
		"password, bad scheme": {HTTPS: "gopher://alice:" + secret + "@p:1"},
	}
	for name, p := range bad {
		err := p.Validate()
		if err == nil {
			t.Errorf("%s: %q accepted", name, p.HTTPS+p.HTTP+p.NoProxy)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error quotes the password: %v", name, err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"http://proxy:3128":                            "http://proxy:3128",
		"http://alice:" + secret + "@proxy:3128":       "http://REDACTED@proxy:3128",
		"http://alice@proxy:3128/":                     "http://REDACTED@proxy:3128/",
		"alice:" + secret + "@proxy:3128":              "REDACTED@proxy:3128",
		"http://a:b@c@proxy:3128/x@y":                  "http://REDACTED@proxy:3128/x@y",
		"http://alice:" + secret + "@[::1":             "http://REDACTED@[::1",
		"http://proxy:3128/path?user=x@y":              "http://proxy:3128/path?user=x@y",
		"":                                             "",
		"socks5://u%40corp:" + secret + "@proxy:1080/": "socks5://REDACTED@proxy:1080/",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// A Proxy printed any way (fmt verbs, slog) never shows the password.
func TestProxyPrintsNoPassword(t *testing.T) {
	p := Proxy{HTTPS: "http://alice:" + secret + "@proxy:3128", HTTP: "http://bob:" + secret + "@proxy:3129", NoProxy: ".svc"}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("start", "proxy", p)
	for _, s := range []string{p.String(), fmt.Sprintf("%v %+v %#v %s", p, p, p, p), logged.String()} {
		if strings.Contains(s, secret) || strings.Contains(s, "alice") {
			t.Errorf("printed proxy holds its credentials: %s", s)
		}
		if !strings.Contains(s, "REDACTED@proxy:3128") {
			t.Errorf("printed proxy does not name it: %s", s)
		}
	}
	msg := `Get "https://gcs:443/b": proxyconnect tcp: http://alice:` + secret + `@proxy:3128 refused; user alice:` + secret + `@`
	if got := p.Scrub(msg); strings.Contains(got, secret) {
		t.Errorf("Scrub left the password: %s", got)
	}
}

// Env and Func say the same thing, and that is what net/http's ProxyFromEnvironment makes of
// the variables: https through HTTPS, http through HTTP, NO_PROXY and loopback direct.
func TestEnvAndFunc(t *testing.T) {
	p := Proxy{HTTPS: "http://sp:1", HTTP: "http://hp:2", NoProxy: ".svc,10.0.0.0/8"}
	env := strings.Join(p.Env(), " ")
	if env != "HTTPS_PROXY=http://sp:1 HTTP_PROXY=http://hp:2 NO_PROXY=.svc,10.0.0.0/8,"+AlwaysDirect {
		t.Fatalf("env %q", env)
	}
	if got := strings.Join((Proxy{HTTPS: "http://sp:1"}).Env(), " "); got != "HTTPS_PROXY=http://sp:1 NO_PROXY="+AlwaysDirect {
		t.Errorf("HTTPS proxy alone: %q", got)
	}
	if got := (Proxy{}).Env(); len(got) != 0 {
		t.Errorf("no proxy: %q", got)
	}
	for target, want := range map[string]string{
		"https://storage.googleapis.com/storage/v1/": "http://sp:1",
		"http://gcs.corp:4443/storage/v1/":           "http://hp:2",
		"https://gcs.ns.svc:4443/":                   "",
		"http://10.1.2.3:14443/":                     "",
		"https://127.0.0.1:4443/":                    "", // Go's rule: loopback is never proxied
		"https://localhost:4443/":                    "",
		// The metadata server is always reached directly (AlwaysDirect).
		"http://metadata.google.internal/computeMetadata/v1/instance/machine-type": "",
		"http://169.254.169.254/computeMetadata/v1/":                               "",
	} {
		u, _ := url.Parse(target)
		if got := p.For(u); got != want {
			t.Errorf("%s goes through %q, want %q", target, got, want)
		}
	}
}

func TestParseCABundle(t *testing.T) {
	ca := testCert(t)
	two := append(append([]byte{}, ca...), ca...)
	if n, err := ParseCABundle(two); err != nil || n != 2 {
		t.Fatalf("two certificates: %d, %v", n, err)
	}
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("not-for-you-" + secret)})
	for name, b := range map[string][]byte{
		"empty":       nil,
		"not PEM":     []byte("hello"),
		"trailing":    append(append([]byte{}, ca...), "junk"...),
		"private key": append(append([]byte{}, ca...), key...),
		"bad DER":     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")}),
		"too large":   bytes.Repeat([]byte("a"), MaxCABundle+1),
	} {
		_, err := ParseCABundle(b)
		if err == nil {
			t.Errorf("%s accepted", name)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error quotes the block: %v", name, err)
		}
	}
	if got := Combine([]byte("SYS"), ca); !bytes.Equal(got, append([]byte("SYS\n"), ca...)) {
		t.Errorf("Combine: %q", got)
	}
	if got := Combine(nil, ca); !bytes.Equal(got, ca) {
		t.Errorf("Combine without system roots: %q", got)
	}
}

func testCert(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
