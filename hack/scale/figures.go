package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/promrun"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/quantile"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
)

// quantiles are the figures of every latency row: p50, p90, p99, max.
var quantiles = []float64{0.5, 0.9, 0.99, 1}

// dist is a latency distribution's n and quantiles.
type dist struct {
	n int
	q []time.Duration // at quantiles
}

func distOf(ds []time.Duration) dist {
	s := slices.Clone(ds)
	slices.Sort(s)
	d := dist{n: len(s)}
	for _, p := range quantiles {
		d.q = append(d.q, quantile.Nearest(s, p))
	}
	return d
}

func fmtDur(d time.Duration) string {
	if d < time.Second && d > -time.Second {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// row is a table row of a distribution: | what | n | p50 | p90 | p99 | max |.
func row(what string, ds []time.Duration) string {
	d := distOf(ds)
	if d.n == 0 {
		return fmt.Sprintf("| %s | 0 | | | | |", what)
	}
	cells := []string{what, strconv.Itoa(d.n)}
	for _, q := range d.q {
		cells = append(cells, fmtDur(q))
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

// shareRow is the difference of two distributions at each quantile, with and without the
// driver, and their ratio: the sidecar's share, side by side with the figures it comes from.
func shareRow(what string, with, without []time.Duration) string {
	a, b := distOf(with), distOf(without)
	if a.n == 0 || b.n == 0 {
		return fmt.Sprintf("| %s | %d / %d | | | | |", what, a.n, b.n)
	}
	cells := []string{what, fmt.Sprintf("%d / %d", a.n, b.n)}
	for i := range quantiles {
		c := fmt.Sprintf("%+.2f s", (a.q[i] - b.q[i]).Seconds())
		if b.q[i] > 0 {
			c += fmt.Sprintf(" (x%.2f)", float64(a.q[i])/float64(b.q[i]))
		}
		cells = append(cells, c)
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

func durations(m map[string]podTimes, f func(podTimes) time.Duration) []time.Duration {
	var out []time.Duration
	for _, p := range m {
		out = append(out, f(p))
	}
	return out
}

func startLatency(p podTimes) time.Duration { return p.appStart.Sub(p.created) }
func exitLatency(p podTimes) time.Duration  { return p.done.Sub(p.appExit) }
func createCall(p podTimes) time.Duration   { return p.createCall }

// pairedRun is one mode's run with volumes and its twin.
type pairedRun struct{ vol, twin *runResult }

func printLatencies(w io.Writer, burst burstResult, runs []pairedRun, soak *soakResult) {
	fmt.Fprintln(w, "\n| latency | n | p50 | p90 | p99 | max |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	fmt.Fprintln(w, row("admission burst, quiet node: webhook (its log)", burst.webhook))
	fmt.Fprintln(w, row("admission burst, quiet node: pod Create call", burst.create))
	for _, r := range runs {
		name := r.vol.spec.name
		fmt.Fprintln(w, row(name+": pod created -> app start, volumes", durations(r.vol.pods, startLatency)))
		fmt.Fprintln(w, row(name+": pod created -> app start, twin", durations(r.twin.pods, startLatency)))
		fmt.Fprintln(w, shareRow(name+": the sidecar's share of the start (volumes - twin; x ratio)", durations(r.vol.pods, startLatency), durations(r.twin.pods, startLatency)))
		fmt.Fprintln(w, row(name+": app exit -> pod Succeeded, volumes", durations(r.vol.pods, exitLatency)))
		fmt.Fprintln(w, row(name+": app exit -> pod Succeeded, twin", durations(r.twin.pods, exitLatency)))
		fmt.Fprintln(w, shareRow(name+": the sidecar's share of the exit (volumes - twin; x ratio)", durations(r.vol.pods, exitLatency), durations(r.twin.pods, exitLatency)))
		fmt.Fprintln(w, row(name+": webhook admission (its log)", r.vol.m.admission()))
		fmt.Fprintln(w, row(name+": pod Create call, volumes (admission included)", durations(r.vol.pods, createCall)))
		fmt.Fprintln(w, row(name+": pod Create call, twin (no webhook)", durations(r.twin.pods, createCall)))
		all, sidecar := r.vol.m.ready()
		fmt.Fprintln(w, row(name+": NodePublishVolume (node plugin log)", r.vol.m.publish()))
		fmt.Fprintln(w, row(name+": NodePublishVolume -> gcsfuse serving, the kubelet starting the sidecar included (node plugin log)", all))
		fmt.Fprintln(w, row(name+": sidecar took the descriptor -> gcsfuse serving (the mount's own start)", sidecar))
	}
	if soak != nil {
		fmt.Fprintln(w, row("soak: Job created -> Complete", soak.took))
		fmt.Fprintln(w, row("soak: webhook admission (its log)", soak.m.admission()))
		all, sidecar := soak.m.ready()
		fmt.Fprintln(w, row("soak: NodePublishVolume -> gcsfuse serving (node plugin log)", all))
		fmt.Fprintln(w, row("soak: sidecar took the descriptor -> gcsfuse serving", sidecar))
	}
}

func printFigures(w io.Writer, runs []pairedRun, soak *soakResult) {
	fmt.Fprintln(w, "\n| figure | value |")
	fmt.Fprintln(w, "|---|---|")
	perPod := func(m measured, n int) string {
		if n == 0 {
			return fmt.Sprintf("%.2f s", m.cpu)
		}
		return fmt.Sprintf("%.2f s, %.1f ms per pod", m.cpu, 1000*m.cpu/float64(n))
	}
	for _, r := range runs {
		name := r.vol.spec.name
		fmt.Fprintf(w, "| %s: pods Succeeded, volumes / twin | %d/%d / %d/%d |\n", name, len(r.vol.pods), r.vol.n, len(r.twin.pods), r.twin.n)
		fmt.Fprintf(w, "| %s: objects in the emulator with their bytes (size, MD5) | %d/%d |\n", name, r.vol.objects.ok, r.vol.objects.want)
		fmt.Fprintf(w, "| %s: admission p99, the API server's histogram of the webhook call (bucket bound) | %s |\n", name, r.vol.m.apiAdmissionP99)
		fmt.Fprintf(w, "| %s: NodePublishVolume -> serving p99, %s (bucket bound) | %s |\n", name, metricscatalog.VolumeReady.Name, r.vol.m.readyP99)
		fmt.Fprintf(w, "| %s: volume failures (node plugin counter) | %.0f |\n", name, r.vol.m.volumeFailures)
		fmt.Fprintf(w, "| %s: node plugin peak RSS (%s samples), volumes / twin; VmHWM since its start | %.1f / %.1f MiB; %.1f MiB |\n", name, sampleEvery, r.vol.m.peaks.nodeRSS, r.twin.m.peaks.nodeRSS, r.vol.m.hwm)
		fmt.Fprintf(w, "| %s: node plugin CPU, volumes | %s |\n", name, perPod(r.vol.m, r.vol.n))
		fmt.Fprintf(w, "| %s: node plugin CPU, twin (the runtime watch sees every pod) | %s |\n", name, perPod(r.twin.m, r.twin.n))
		fmt.Fprintf(w, "| %s: node plugin peak RSS and CPU, volumes / twin, from Prometheus (%s scrapes) | %s / %s |\n", name, promrun.ScrapeInterval, r.vol.m.promString(), r.twin.m.promString())
		fmt.Fprintf(w, "| %s: gcsfuse RSS per volume (peak of each of %d processes) | %s |\n", name, len(r.vol.m.peaks.gcsfuse), mibStats(r.vol.m.peaks.gcsfuse))
		fmt.Fprintf(w, "| %s: sidecar RSS (peak of each of %d processes) | %s |\n", name, len(r.vol.m.peaks.sidecar), mibStats(r.vol.m.peaks.sidecar))
		fmt.Fprintf(w, "| %s: gcsfuse processes at once (peak) | %d |\n", name, r.vol.m.peaks.maxGcsfuse)
	}
	if soak != nil {
		fmt.Fprintf(w, "| soak: Jobs Complete | %d/%d |\n", len(soak.took), soak.jobs)
		fmt.Fprintf(w, "| soak: objects in the emulator with their bytes (size, MD5) | %d/%d |\n", soak.objects.ok, soak.objects.want)
		fmt.Fprintf(w, "| soak: Jobs per minute | %.1f (%d in %s) |\n", soak.perMinute(), len(soak.took), soak.elapsed.Round(time.Second))
		fmt.Fprintf(w, "| soak: admission p99, the API server's histogram (bucket bound) | %s |\n", soak.m.apiAdmissionP99)
		fmt.Fprintf(w, "| soak: NodePublishVolume -> serving p99, %s (bucket bound) | %s |\n", metricscatalog.VolumeReady.Name, soak.m.readyP99)
		fmt.Fprintf(w, "| soak: volume failures (node plugin counter) | %.0f |\n", soak.m.volumeFailures)
		fmt.Fprintf(w, "| soak: node plugin peak RSS (%s samples); VmHWM since its start | %.1f MiB; %.1f MiB |\n", sampleEvery, soak.m.peaks.nodeRSS, soak.m.hwm)
		fmt.Fprintf(w, "| soak: node plugin CPU | %.2f s, %.1f ms per Job |\n", soak.m.cpu, 1000*soak.m.cpu/float64(max(1, len(soak.took))))
		fmt.Fprintf(w, "| soak: node plugin peak RSS and CPU, from Prometheus (%s scrapes) | %s |\n", promrun.ScrapeInterval, soak.m.promString())
		fmt.Fprintf(w, "| soak: gcsfuse processes at once (peak) | %d |\n", soak.m.peaks.maxGcsfuse)
	}
}

// promString is the Prometheus figures of m, or why there are none.
func (m measured) promString() string {
	if m.promErr != nil {
		return "none: " + m.promErr.Error()
	}
	return fmt.Sprintf("%.1f MiB, %.2f s", m.promRSS, m.promCPU)
}

func mibStats(v []float64) string {
	if len(v) == 0 {
		return "no samples"
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("p50 %.1f MiB, p99 %.1f MiB, max %.1f MiB", quantile.Nearest(s, 0.5), quantile.Nearest(s, 0.99), s[len(s)-1])
}
