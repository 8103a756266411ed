// Package testproxy is the HTTP proxy the tests put between gcsfuse and the emulator: a
// forward proxy for http:// requests and a CONNECT tunnel for https://, which records
// every request's target, so a test can prove the traffic crossed it, and can refuse them
// all, so a test can prove a refusing proxy is reported.
package testproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// DialTimeout bounds the proxy's connection to a target.
const DialTimeout = 10 * time.Second

// Proxy is an http.Handler; its zero value proxies every request to its own target.
type Proxy struct {
	// Resolve maps a request's host:port to the address to dial, as a real proxy resolves
	// names the client cannot; ok false refuses the request. Nil: dial host:port itself.
	Resolve func(hostport string) (addr string, ok bool)
	// Log, if set, gets one line per request: "<method> <target>".
	Log func(line string)

	mu       sync.Mutex
	refuse   bool
	requests []string
}

// SetRefuse makes the proxy refuse (403) every request from now on, or serve again.
func (p *Proxy) SetRefuse(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
}

// Requests are the requests seen so far, "<method> <target>", the refused ones included.
func (p *Proxy) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests...)
}

// transport goes straight to the target (no proxy of its own); dial is the address to use.
func transport(dial string) *http.Transport {
	d := &net.Dialer{Timeout: DialTimeout}
	return &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, dial)
	}}
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Host
	if r.Method != http.MethodConnect {
		target = r.URL.String()
	}
	line := r.Method + " " + target
	p.mu.Lock()
	p.requests = append(p.requests, line)
	refuse := p.refuse
	p.mu.Unlock()
	if p.Log != nil {
		p.Log(line)
	}
	addr, ok := r.Host, true
	if p.Resolve != nil {
		addr, ok = p.Resolve(r.Host)
	}
	if refuse || !ok {
		http.Error(w, "proxy refuses", http.StatusForbidden)
		return
	}
	if r.Method == http.MethodConnect {
		p.tunnel(w, addr)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "not a proxy request", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	out.Header.Del("Proxy-Authorization")
	tr := transport(addr)
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// tunnel answers a CONNECT: it dials addr and copies both ways until either side closes.
func (p *Proxy) tunnel(w http.ResponseWriter, addr string) {
	up, err := net.DialTimeout("tcp", addr, DialTimeout)
	if err != nil {
		if p.Log != nil {
			p.Log("ERROR " + addr + " " + err.Error())
		}
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusOK)
	c, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	done := make(chan struct{})
	go func() { // ends when the client side closes or up is closed below
		defer close(done)
		_, _ = io.Copy(up, buf)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, up)
	c.Close()
	up.Close()
	<-done
}
