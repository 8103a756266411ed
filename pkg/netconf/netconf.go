// Package netconf is how gcsfuse reaches storage on a network that needs more than a route:
// an HTTP(S) proxy and an extra CA bundle. The node plugin takes them as flags (the chart's
// proxy.* and caBundle values), checks them at start, and gives them with each volume to the
// sidecar (pkg/handoff, Volume version 2; the bundle as a file in the pod's emptyDir). The
// sidecar gives them to gcsfuse alone, in its environment (HTTPS_PROXY, HTTP_PROXY,
// NO_PROXY and SSL_CERT_FILE, which Go's net/http and crypto/x509 read), and uses the same
// settings for its own bucket check.
//
// A proxy URL may carry a user and password: nothing here prints them (Redact, Proxy's
// String and LogValue, Scrub for text that may quote them).
package netconf

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpproxy"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/lazyre"
)

// Bounds of what a node plugin accepts.
const (
	// MaxProxyURL bounds one proxy URL.
	MaxProxyURL = 2048
	// MaxNoProxy bounds the NO_PROXY list.
	MaxNoProxy = 4096
	// MaxCABundle bounds the extra CA bundle (a few hundred certificates).
	MaxCABundle = 1 << 20
)

// redacted stands for a proxy URL's user information wherever it is shown.
const redacted = "REDACTED"

// Proxy is the proxy gcsfuse goes through, in the variables' own terms: HTTPS is the proxy of
// https:// requests (HTTPS_PROXY), HTTP of http:// ones (HTTP_PROXY), NoProxy the hosts that
// are reached directly (NO_PROXY: comma separated names, .domain suffixes, IPs, CIDRs, with
// an optional :port, or *). Go never proxies a request to "localhost" or a loopback IP
// literal, whatever NO_PROXY says. The zero value is no proxy.
type Proxy struct {
	HTTPS, HTTP, NoProxy string
}

// IsZero reports whether no proxy is set.
func (p Proxy) IsZero() bool { return p == Proxy{} }

// Validate reports the first thing wrong with p, naming the setting; the message never holds
// a URL's user or password.
func (p Proxy) Validate() error {
	for _, u := range []struct{ name, v string }{{"HTTPS proxy", p.HTTPS}, {"HTTP proxy", p.HTTP}} {
		if u.v == "" {
			continue
		}
		if err := validateURL(u.v); err != nil {
			return fmt.Errorf("%s %s: %w", u.name, Redact(u.v), err)
		}
	}
	if err := validateNoProxy(p.NoProxy); err != nil {
		return fmt.Errorf("no-proxy list: %w", err)
	}
	if p.NoProxy != "" && p.HTTPS == "" && p.HTTP == "" {
		return errors.New("no-proxy list without a proxy: set an HTTPS or HTTP proxy, or leave it empty")
	}
	return nil
}

var schemes = map[string]bool{"http": true, "https": true, "socks5": true, "socks5h": true}

func validateURL(s string) error {
	if len(s) > MaxProxyURL {
		return fmt.Errorf("longer than %d bytes", MaxProxyURL)
	}
	if strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return errors.New("has spaces or control characters")
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included: not passed on.
		return errors.New("not a URL")
	}
	switch {
	case !schemes[u.Scheme]:
		return errors.New("want scheme http://, https://, socks5:// or socks5h://")
	case u.Hostname() == "":
		return errors.New("no host")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.Opaque != "":
		return errors.New("want scheme://[user:password@]host[:port] without a path, query or fragment")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return errors.New("port out of 1-65535")
		}
	}
	return nil
}

// noProxyEntry is one NO_PROXY entry: a host name, a .domain suffix, an IP or CIDR (IPv6 in
// brackets with a port), each with an optional :port; or *.
var noProxyEntry = lazyre.New(`^(\*|\.?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*(:[0-9]{1,5})?|[0-9A-Fa-f.:]+(/[0-9]{1,3})?|\[[0-9A-Fa-f.:]+\](:[0-9]{1,5})?)$`)

func validateNoProxy(s string) error {
	if len(s) > MaxNoProxy {
		return fmt.Errorf("longer than %d bytes", MaxNoProxy)
	}
	if s == "" {
		return nil
	}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !noProxyEntry.MatchString(e) {
			return fmt.Errorf("entry %q: want a host, .domain, IP, CIDR (each with an optional :port) or *", e)
		}
	}
	return nil
}

// AlwaysDirect is what NO_PROXY always holds when a proxy is set: the GCE and GKE metadata
// server, link-local on every node and never behind a proxy. gcsfuse asks it over http://
// for the machine type and, with Application Default Credentials on GKE, for the pod's
// tokens, and those requests honour HTTP_PROXY.
const AlwaysDirect = "metadata.google.internal,169.254.169.254"

// noProxy is NoProxy with AlwaysDirect, when a proxy is set.
func (p Proxy) noProxy() string {
	if p.HTTPS == "" && p.HTTP == "" {
		return p.NoProxy
	}
	if strings.TrimSpace(p.NoProxy) == "" {
		return AlwaysDirect
	}
	return p.NoProxy + "," + AlwaysDirect
}

// Env is the environment that makes Go's http.ProxyFromEnvironment (gcsfuse's HTTP client,
// its token exchanges, its gRPC dialer) use p: only what is set, and NO_PROXY with
// AlwaysDirect.
func (p Proxy) Env() []string {
	var env []string
	for _, kv := range [][2]string{{"HTTPS_PROXY", p.HTTPS}, {"HTTP_PROXY", p.HTTP}, {"NO_PROXY", p.noProxy()}} {
		if kv[1] != "" {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}

// Func is the proxy function Env stands for, with the same rules (golang.org/x/net's
// httpproxy, which net/http's ProxyFromEnvironment is): for a client of our own that must
// go where gcsfuse goes.
func (p Proxy) Func() func(*url.URL) (*url.URL, error) {
	return (&httpproxy.Config{HTTPSProxy: p.HTTPS, HTTPProxy: p.HTTP, NoProxy: p.noProxy()}).ProxyFunc()
}

// For names the proxy a request to u goes through, redacted ("" when none).
func (p Proxy) For(u *url.URL) string {
	pu, err := p.Func()(u)
	if err != nil || pu == nil {
		return ""
	}
	return Redact(pu.String())
}

// String shows p with every URL redacted.
func (p Proxy) String() string {
	if p.IsZero() {
		return "none"
	}
	var parts []string
	for _, kv := range [][2]string{{"https", Redact(p.HTTPS)}, {"http", Redact(p.HTTP)}, {"no-proxy", p.NoProxy}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, " ")
}

// GoString is String: %#v must not print a password either.
func (p Proxy) GoString() string { return p.String() }

// LogValue keeps passwords out of structured logs.
func (p Proxy) LogValue() slog.Value { return slog.StringValue(p.String()) }

// Scrub replaces in s every user information that p's URLs carry (as written, and as
// url.URL would print it), for text that may quote a proxy URL: a client's error, a line
// of gcsfuse's log.
func (p Proxy) Scrub(s string) string {
	for _, raw := range []string{p.HTTPS, p.HTTP} {
		info := userinfo(raw)
		if info == "" {
			continue
		}
		s = strings.ReplaceAll(s, info+"@", redacted+"@")
		if u, err := url.Parse(raw); err == nil && u.User != nil {
			s = strings.ReplaceAll(s, u.User.String()+"@", redacted+"@")
			if pw, ok := u.User.Password(); ok && len(pw) >= 4 {
				s = strings.ReplaceAll(s, pw, redacted)
			}
		}
	}
	return s
}

// Redact returns s with the user information of its authority (user:password@) replaced
// by REDACTED, also when s is not a valid URL.
func Redact(s string) string {
	info := userinfo(s)
	if info == "" {
		return s
	}
	return strings.Replace(s, info+"@", redacted+"@", 1)
}

// userinfo is what stands between "scheme://" (if any) and the last "@" of the authority.
func userinfo(s string) string {
	rest := s
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	return rest[:at]
}

// ParseCABundle checks an extra CA bundle: PEM, CERTIFICATE blocks only, each a parsable
// X.509 certificate, at least one. It returns how many there are. A private key, text that
// is not PEM, or a certificate that does not parse is refused, naming the block, never
// quoting it.
func ParseCABundle(b []byte) (int, error) {
	if len(b) > MaxCABundle {
		return 0, fmt.Errorf("CA bundle is %d bytes, limit %d", len(b), MaxCABundle)
	}
	n := 0
	rest := b
	for {
		block, r := pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				return 0, fmt.Errorf("CA bundle: text after certificate %d is not PEM", n)
			}
			break
		}
		rest = r
		if block.Type != "CERTIFICATE" {
			return 0, fmt.Errorf("CA bundle: block %d is a %q, want only CERTIFICATE blocks", n+1, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return 0, fmt.Errorf("CA bundle: certificate %d does not parse: %v", n+1, err)
		}
		n++
	}
	if n == 0 {
		return 0, errors.New("CA bundle holds no PEM certificate")
	}
	return n, nil
}

// Combine is the bundle gcsfuse trusts: the system's roots, then the extra ones.
func Combine(system, extra []byte) []byte {
	out := make([]byte, 0, len(system)+len(extra)+1)
	out = append(out, system...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, extra...)
}
