package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
)

// measured is what every run and the soak record about the node plugin and the components
// around themselves.
type measured struct {
	start time.Time
	// lines are the node plugin's and the webhook's log lines of interest since start.
	lines []string
	peaks *peaks
	// cpu is the node plugin's CPU seconds during the phase; hwm its VmHWM (peak RSS since
	// it started) at the phase's end, MiB.
	cpu, hwm float64
	// readyP99 is the node plugin's own histogram of NodePublishVolume -> serving, and
	// apiAdmissionP99 the API server's histogram of the webhook's calls (bucket bounds).
	readyP99, apiAdmissionP99 string
	// volumeFailures is the increase of the node plugin's volume failure counter.
	volumeFailures float64
	// promRSS (MiB) and promCPU (s) are the node plugin's peak RSS and CPU during the phase
	// as Prometheus saw them (its process_* series, 1 s scrapes); promErr why not.
	promRSS, promCPU float64
	promErr          error
}

func (m measured) publish() []time.Duration   { return publishLatencies(m.lines, m.start) }
func (m measured) admission() []time.Duration { return admissionLatencies(m.lines, m.start) }
func (m measured) ready() (all, sidecar []time.Duration) {
	return readyLatencies(m.lines, m.start)
}

// measure runs fn while sampling the node plugin and reading the components' logs, and
// scrapes the node plugin's and the API server's metrics before and after.
func (s *scale) measure(ctx context.Context, np nodePlugin, fn func() error) (measured, error) {
	m := measured{start: time.Now()}
	before, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return m, err
	}
	apiBefore, err := apiServerMetrics(ctx, s.cs)
	if err != nil {
		return m, err
	}
	cpu0 := cpuSeconds(np.pid)
	smp := startSampler(np.pid)
	lp := s.startLogPoller(ctx, m.start)
	err = fn()
	m.peaks = smp.stop()
	m.cpu = cpuSeconds(np.pid) - cpu0
	m.hwm = statusKiB(np.pid, "VmHWM") / 1024
	m.lines = lp.stop(ctx)
	if err != nil {
		return m, err
	}
	after, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return m, err
	}
	m.promRSS, m.promCPU, m.promErr = s.promFigures(ctx, m.start)
	m.readyP99 = histogramP99(before, after, metricscatalog.VolumeReady.Name, nil)
	m.apiAdmissionP99 = apiServerAdmissionP99(ctx, s.cs, apiBefore)
	m.volumeFailures = sumMetric(after, metricscatalog.VolumeFailures.Name) - sumMetric(before, metricscatalog.VolumeFailures.Name)
	return m, nil
}

// nodePlugin is the node plugin's pod and, on this machine, its process.
type nodePlugin struct {
	pod      string
	pid      int
	restarts int32
}

// nodePlugin finds the node plugin's pod and its process: the gcsfuse-csi-node process in
// the cgroup of the pod's container (its id is in the process's cgroup paths).
func (s *scale) nodePlugin(ctx context.Context) (nodePlugin, error) {
	l, err := s.cs.CoreV1().Pods(driverNS).List(ctx, metav1.ListOptions{LabelSelector: nodePluginLabel})
	if err != nil {
		return nodePlugin{}, err
	}
	if len(l.Items) != 1 {
		return nodePlugin{}, fmt.Errorf("%d node plugin pods, want 1", len(l.Items))
	}
	p := l.Items[0]
	np := nodePlugin{pod: p.Name}
	var cid string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == nodePluginCommand {
			np.restarts = cs.RestartCount
			if _, id, ok := strings.Cut(cs.ContainerID, "://"); ok {
				cid = id
			}
		}
	}
	if cid == "" {
		return np, fmt.Errorf("node plugin pod %s: no running container", p.Name)
	}
	var candidates []int
	for _, pid := range pids() {
		if argv0(pid) != nodePluginCommand {
			continue
		}
		candidates = append(candidates, pid)
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && bytes.Contains(b, []byte(cid)) {
			np.pid = pid
			return np, nil
		}
	}
	return np, fmt.Errorf("no %s process in the cgroup of container %s (candidates %v)", nodePluginCommand, cid, candidates)
}

func (s *scale) scrapeNodePlugin(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	l, err := s.cs.CoreV1().Pods(driverNS).List(c, metav1.ListOptions{LabelSelector: nodePluginLabel})
	if err != nil {
		return nil, fmt.Errorf("node plugin pods: %w", err)
	}
	if len(l.Items) != 1 {
		return nil, fmt.Errorf("%d node plugin pods, want 1", len(l.Items))
	}
	raw, err := s.cs.CoreV1().Pods(driverNS).ProxyGet("http", l.Items[0].Name, metricsPort, "/metrics", nil).DoRaw(c)
	if err != nil {
		return nil, fmt.Errorf("scrape the node plugin: %w", err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(raw))
}

// sumMetric sums a counter's or gauge's series.
func sumMetric(mfs map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	if mf := mfs[name]; mf != nil {
		for _, m := range mf.Metric {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return v
}

// logPoller reads the node plugin's and the webhook's logs every logPollEvery during a
// phase, keeping the lines relevantLine picks (deduplicated), so that a rotation of the
// container logs loses nothing older than one period.
type logPoller struct {
	s               *scale
	since, last     time.Time
	seen            map[string]bool
	lines           []string
	stopC, stoppedC chan struct{}
}

func (s *scale) startLogPoller(ctx context.Context, since time.Time) *logPoller {
	lp := &logPoller{s: s, since: since, last: since, seen: map[string]bool{}, stopC: make(chan struct{}), stoppedC: make(chan struct{})}
	go func() { // owned by the phase: ends at stop
		defer close(lp.stoppedC)
		t := time.NewTicker(logPollEvery)
		defer t.Stop()
		for {
			select {
			case <-lp.stopC:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				lp.fetch(ctx)
			}
		}
	}()
	return lp
}

func (lp *logPoller) fetch(ctx context.Context) {
	from := lp.last.Add(-logOverlap)
	if from.Before(lp.since) {
		from = lp.since
	}
	now := time.Now()
	for _, sel := range []string{nodePluginLabel, webhookLabel} {
		for _, l := range lp.s.logLines(ctx, driverNS, sel, from) {
			if relevantLine(l) && !lp.seen[l] {
				lp.seen[l] = true
				lp.lines = append(lp.lines, l)
			}
		}
	}
	lp.last = now
}

// stop reads once more and returns every line kept.
func (lp *logPoller) stop(ctx context.Context) []string {
	close(lp.stopC)
	<-lp.stoppedC
	lp.fetch(ctx)
	return lp.lines
}

// relevantLine picks the log lines the figures come from.
func relevantLine(l string) bool {
	return (strings.Contains(l, "csi call") && strings.Contains(l, "NodePublishVolume")) ||
		strings.Contains(l, "descriptor offered to sidecar") ||
		strings.Contains(l, `msg="gcsfuse serving"`) ||
		strings.Contains(l, "admission served")
}

// logLines returns the lines of the logs of the pods selected since t.
func (s *scale) logLines(ctx context.Context, namespace, selector string, since time.Time) []string {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	l, err := s.cs.CoreV1().Pods(namespace).List(c, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil
	}
	var out []string
	st := metav1.NewTime(since)
	for _, p := range l.Items {
		b, err := s.cs.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &st}).DoRaw(c)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			out = append(out, sc.Text())
		}
	}
	return out
}

// field returns the value of key in a slog line: text (key=value, the node plugin) or JSON
// (the webhook).
func field(line, key string) string {
	if t := strings.TrimSpace(line); strings.HasPrefix(t, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(t), &m) != nil {
			return ""
		}
		switch v := m[key].(type) {
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
		return ""
	}
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := line[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		if j := strings.Index(v[1:], `"`); j >= 0 {
			return v[1 : j+1]
		}
	}
	if j := strings.IndexByte(v, ' '); j >= 0 {
		return v[:j]
	}
	return v
}

// publishLatencies are the NodePublishVolume durations the node plugin logged (debug).
func publishLatencies(lines []string, since time.Time) []time.Duration {
	var out []time.Duration
	for _, l := range lines {
		if strings.Contains(l, "csi call") && strings.Contains(l, "NodePublishVolume") && logTime(l).After(since) {
			if ms, err := strconv.Atoi(field(l, "ms")); err == nil {
				out = append(out, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	return out
}

// readyLatencies pair each volume's "descriptor offered" line with its "gcsfuse serving" line
// (all: NodePublishVolume -> serving, which includes the wait for the kubelet to start the
// sidecar container), and read the sidecar's own part from the latter (ms: the sidecar took
// the descriptor -> gcsfuse serving).
func readyLatencies(lines []string, since time.Time) (all, sidecar []time.Duration) {
	offered := map[string]time.Time{}
	for _, l := range lines {
		key := field(l, "podUID") + "/" + field(l, "volume")
		switch {
		case strings.Contains(l, "descriptor offered to sidecar"):
			offered[key] = logTime(l)
		case strings.Contains(l, `msg="gcsfuse serving"`):
			if t0, ok := offered[key]; ok && t0.After(since) {
				all = append(all, logTime(l).Sub(t0))
				if ms, err := strconv.Atoi(field(l, "ms")); err == nil {
					sidecar = append(sidecar, time.Duration(ms)*time.Millisecond)
				}
			}
		}
	}
	return all, sidecar
}

// admissionLatencies are the webhook's own durations of its admissions (debug).
func admissionLatencies(lines []string, since time.Time) []time.Duration {
	var out []time.Duration
	for _, l := range lines {
		if strings.Contains(l, "admission served") && logTime(l).After(since) {
			if us, err := strconv.Atoi(field(l, "us")); err == nil {
				out = append(out, time.Duration(us)*time.Microsecond)
			}
		}
	}
	return out
}

func logTime(line string) time.Time {
	v := field(line, "time")
	if !strings.HasPrefix(strings.TrimSpace(line), "{") {
		v = field(" "+line, "time")
	}
	t, _ := time.Parse(time.RFC3339Nano, v)
	return t
}

func apiServerMetrics(ctx context.Context, cs kubernetes.Interface) (map[string]*dto.MetricFamily, error) {
	c, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(c)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(bytes.NewReader(raw))
}

// apiServerAdmissionP99 reads the API server's own histogram of our webhook's calls.
func apiServerAdmissionP99(ctx context.Context, cs kubernetes.Interface, before map[string]*dto.MetricFamily) string {
	mfs, err := apiServerMetrics(ctx, cs)
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	return histogramP99(before, mfs, "apiserver_admission_webhook_admission_duration_seconds", map[string]string{"type": "admit"})
}

// histogramP99 is the upper bound of the bucket holding the 99th percentile of the samples
// added between before and after (before nil: all), over the series whose labels include want.
func histogramP99(before, after map[string]*dto.MetricFamily, name string, want map[string]string) string {
	sum := func(mfs map[string]*dto.MetricFamily) (bounds []float64, counts []uint64) {
		if mfs == nil || mfs[name] == nil {
			return nil, nil
		}
	next:
		for _, m := range mfs[name].Metric {
			for _, lp := range m.Label {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			for i, b := range m.GetHistogram().GetBucket() {
				if i >= len(bounds) {
					bounds = append(bounds, b.GetUpperBound())
					counts = append(counts, 0)
				}
				counts[i] += b.GetCumulativeCount()
			}
		}
		return bounds, counts
	}
	bounds, c1 := sum(after)
	_, c0 := sum(before)
	if len(bounds) == 0 {
		return "no samples"
	}
	delta := func(i int) uint64 {
		if i < len(c0) {
			return c1[i] - c0[i]
		}
		return c1[i]
	}
	total := delta(len(bounds) - 1)
	if total == 0 {
		return "no samples"
	}
	for i, b := range bounds {
		if float64(delta(i)) >= 0.99*float64(total) {
			if math.IsInf(b, 1) { // the +Inf bucket of a text exposition: above the last bound
				if i == 0 {
					return fmt.Sprintf("no finite bucket (n=%d)", total)
				}
				return fmt.Sprintf("> %s (n=%d)", time.Duration(bounds[i-1]*float64(time.Second)), total)
			}
			return fmt.Sprintf("<= %s (n=%d)", time.Duration(b*float64(time.Second)), total)
		}
	}
	return fmt.Sprintf("> %s (n=%d)", time.Duration(bounds[len(bounds)-1]*float64(time.Second)), total)
}
