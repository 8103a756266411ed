package sidecar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/gcsfusemetrics"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// gcsfuse v3.13.0 serves Prometheus metrics only over TCP, on every address of the pod's
// network namespace (":<port>", its --prometheus-port); it has no unix socket option. So the
// sidecar gives each gcsfuse a free port, reads it on the pod's loopback only, and serves the
// reduced series of all its volumes on the metrics socket in the gcsfuse-tmp emptyDir
// (podfiles.ListenMetrics), where the node plugin reads them (podfiles.DialMetrics). No port
// is declared on the pod, and nothing but the sidecar is meant to read gcsfuse's port (it
// serves counters, no secrets).
const (
	// metricsScrapeTimeout bounds one read of one gcsfuse's metrics on the loopback.
	metricsScrapeTimeout = 2 * time.Second
	// metricsServeTimeout bounds one request on the metrics socket, all volumes together.
	metricsServeTimeout = 5 * time.Second
	// metricsHeaderTimeout bounds how long a client may take to send its request headers.
	metricsHeaderTimeout = time.Second
)

// pickMetricsPort asks the kernel for a TCP port free on every address (as gcsfuse binds it)
// and releases it for gcsfuse. 0 means none: that volume serves without metrics. A port
// taken in between makes gcsfuse log an error and serve on without metrics.
func pickMetricsPort(log *slog.Logger) int {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		log.Warn("no free port for gcsfuse's metrics; the volume serves without them", "err", err)
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// withMetricsPort adds --prometheus-port right after the first argument (--foreground),
// before the positional bucket and mount point.
func withMetricsPort(args []string, port int) []string {
	if port <= 0 || len(args) == 0 {
		return args
	}
	return slices.Insert(args, 1, "--prometheus-port="+strconv.Itoa(port))
}

// metricsClient reads gcsfuse on the loopback: never through a proxy from the environment.
var metricsClient = &http.Client{
	Timeout:   metricsScrapeTimeout,
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, MaxResponseHeaderBytes: 64 << 10},
}

// serveMetrics serves the gcsfuse metrics of every serving volume on the metrics socket
// inside dir (the pinned gcsfuse-tmp directory). The returned stop closes the server and
// removes the socket; Run calls it before it returns.
func (s *Sidecar) serveMetrics(dir *os.File) (stop func(), err error) {
	ln, err := podfiles.ListenMetrics(dir) // replaces a predecessor's socket
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: metricsHeaderTimeout, WriteTimeout: metricsServeTimeout + time.Second}
	done := make(chan struct{})
	go func() { // owned by Run: ends when stop closes the server
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("metrics socket server ended", "err", err)
		}
	}()
	return func() {
		_ = srv.Close()
		<-done
		_ = podfiles.RemoveMetricsSocket(dir)
	}, nil
}

// handleMetrics reads every serving volume's gcsfuse in parallel (bounded by
// metricsScrapeTimeout each) and writes their reduced series, labelled with volume and bucket.
// A volume that does not answer is left out and logged at debug level.
func (s *Sidecar) handleMetrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), metricsServeTimeout)
	defer cancel()
	vols := s.metricsVolumes()
	results := make([][]*dto.MetricFamily, len(vols))
	var wg sync.WaitGroup
	for i, v := range vols {
		wg.Go(func() { // bounded by metricsScrapeTimeout and ctx
			mfs, err := scrapeGcsfuse(ctx, v.metricsPort)
			if err != nil {
				v.log.Debug("gcsfuse metrics unavailable", "err", err)
				return
			}
			results[i] = labelVolume(mfs, v.name, v.bucket)
		})
	}
	wg.Wait()
	format := expfmt.NegotiateAccept(r.Header, expfmt.NewFormat(expfmt.TypeProtoDelim), expfmt.NewFormat(expfmt.TypeTextPlain))
	w.Header().Set("Content-Type", string(format))
	_ = gcsfusemetrics.Encode(w, format, gcsfusemetrics.Merge(results)) // an error: the client went away
}

// metricsVolumes are the volumes whose gcsfuse serves and was given a metrics port.
func (s *Sidecar) metricsVolumes() []*volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*volume
	for _, v := range s.volumes {
		v.mu.Lock()
		ready := v.ready
		v.mu.Unlock()
		if ready && v.metricsPort > 0 {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b *volume) int { return cmp.Compare(a.name, b.name) })
	return out
}

func scrapeGcsfuse(ctx context.Context, port int) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", gcsfusemetrics.Accept)
	resp, err := metricsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("gcsfuse metrics: HTTP %d", resp.StatusCode)
	}
	return gcsfusemetrics.Decode(resp.Body, expfmt.ResponseFormat(resp.Header))
}

// labelVolume reduces gcsfuse's families to the exported ones and puts volume and bucket first
// on every series.
func labelVolume(mfs map[string]*dto.MetricFamily, volume, bucket string) []*dto.MetricFamily {
	out := gcsfusemetrics.Reduce(mfs, func(n string) string { return gcsfusemetrics.Prefix + n })
	for _, mf := range out {
		for _, m := range mf.Metric {
			m.Label = append([]*dto.LabelPair{
				{Name: proto.String(gcsfusemetrics.LabelVolume), Value: proto.String(volume)},
				{Name: proto.String(gcsfusemetrics.LabelBucket), Value: proto.String(bucket)},
			}, m.Label...)
		}
	}
	return out
}
