package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/promrun"
)

// Bounds of the Prometheus run.
const (
	// promUpTimeout bounds the wait for its first scrape of the node plugin.
	promUpTimeout = time.Minute
	// promSettle is how long measure waits after a phase for the last scrape of it.
	promSettle = 2 * time.Second
)

// nodePluginSeries selects the node plugin's own process series as the documented scrape
// job labels them.
const nodePluginSeries = `{job="gcsfuse-csi-node", container="gcsfuse-csi-node"}`

// startPrometheus runs Prometheus against the node plugin and waits for its first scrape; the
// returned function stops it and removes its data.
func (s *scale) startPrometheus(ctx context.Context) (func(), error) {
	l, err := s.cs.CoreV1().Pods(driverNS).List(ctx, metav1.ListOptions{LabelSelector: nodePluginLabel})
	if err != nil {
		return nil, err
	}
	if len(l.Items) != 1 {
		return nil, fmt.Errorf("%d node plugin pods, want 1", len(l.Items))
	}
	dir, err := os.MkdirTemp("", "scale-prometheus-")
	if err != nil {
		return nil, err
	}
	prom, err := promrun.Run(ctx, promrun.Config{Binary: s.opts.prometheus, NetNS: s.opts.netns, Listen: s.opts.promListen,
		ScrapeConfig: s.opts.scrapeConfig, NodePlugin: &l.Items[0], Dir: dir,
		Transport: &http.Transport{Proxy: nil, DialContext: s.dial}}, promUpTimeout)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop := func() {
		prom.Stop()
		os.RemoveAll(dir)
	}
	s.prom = prom
	fmt.Printf("scale: Prometheus on %s scrapes the node plugin every %s (%s)\n", s.opts.promListen, promrun.ScrapeInterval, s.opts.scrapeConfig)
	return stop, nil
}

// promFigures reads the node plugin's peak RSS (MiB) and CPU (s) since start from
// Prometheus: the highest RSS sample, and the last CPU sample minus the first.
func (s *scale) promFigures(ctx context.Context, start time.Time) (rss, cpu float64, err error) {
	if s.prom == nil {
		return 0, 0, errors.New("no Prometheus")
	}
	time.Sleep(promSettle)
	window := fmt.Sprintf("[%ds]", int(math.Ceil(time.Since(start).Seconds())))
	one := func(q string) (float64, error) {
		v, err := s.prom.Query(ctx, q)
		if err != nil {
			return 0, err
		}
		if len(v) != 1 {
			return 0, fmt.Errorf("%s: %d samples, want 1", q, len(v))
		}
		return float64(v[0].Value), nil
	}
	if rss, err = one("max_over_time(process_resident_memory_bytes" + nodePluginSeries + window + ")"); err != nil {
		return 0, 0, err
	}
	cpu, err = one("max_over_time(process_cpu_seconds_total" + nodePluginSeries + window + ") - min_over_time(process_cpu_seconds_total" + nodePluginSeries + window + ")")
	return rss / (1 << 20), cpu, err
}
