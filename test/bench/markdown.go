package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// The README's generated blocks that bench writes (-markdown).
const (
	// blockFigures is "Measured here": mount, exit, data loss and throughput side by side
	// with the incumbent's figures.
	blockFigures = "bench"
	// blockRSS is "Sidecar resources": the memory and CPU the webhook's defaults come from.
	blockRSS = "bench-rss"
	// blockDatapath is "The data path": each workload through standalone gcsfuse, the
	// sidecar mode and the shared mode, with the ratios to standalone.
	blockDatapath = "bench-datapath"
)

// The incumbent driver's figures (the GKE driver, measured on its release of the day), printed beside ours.
const (
	incumbentMountOne    = "1.69-1.76 s"
	incumbentMountSleep  = 1.5 // seconds it sleeps before each volume
	incumbentNativeExit  = "5.02 s"
	incumbentLegacyExit  = "5.5-9.5 s after its exit file (+ republish delay)"
	incumbentFiguresHead = "incumbent (GKE driver, measured)"
)

// results are the figures of one run, for -markdown.
type results struct {
	mount []mountResult
	// mountAlone is standalone gcsfuse's exec -> first stat; mountPhases the p50 of each of
	// mountPhases over the 1-volume rounds.
	mountAlone  stats
	mountPhases []time.Duration
	exit        []exitResult
	dataLoss    *dataLossResult
	writing     *writingResult
	throughput  []throughputResult
	rss         *rssResult
	datapath    *datapathResult
}

type mountResult struct {
	volumes int
	s       stats
}

type exitResult struct {
	mode string
	s    stats
}

type dataLossResult struct {
	iterations, objects, missing int
	s                            stats
}

// writingResult is the data-loss check while writing: every scenario with the drain on,
// perScenario iterations each, and the first ones again with it off.
type writingResult struct {
	perScenario, offIterations int
	on, off                    []scenarioResult
}

type scenarioResult struct {
	sc            drainScenario
	objects, lost int
	s             stats
}

// throughputResult is one comparison: medians in MiB/s, ours then standalone gcsfuse.
type throughputResult struct {
	sizeMiB, rounds int
	write, read     [2]float64
}

type rssResult struct{ phases []rssPhase }

// rssPhase is one phase's peaks (MiB, max over the rounds) and CPU (cores, min and max over
// the rounds).
type rssPhase struct {
	name                           string
	gcsfuse, sidecar, cpuLo, cpuHi float64
}

// byCommand is this run's command line as the README's marker names it: the flags that
// were set, with -markdown's file left as FILE.
func byCommand() string {
	parts := []string{"go run ./test/bench"}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "markdown" {
			return
		}
		v := f.Value.String()
		if v == "" || strings.ContainsAny(v, " \t'\"()") {
			v = strconv.Quote(v)
		}
		parts = append(parts, "-"+f.Name, v)
	})
	return strings.Join(append(parts, "-markdown", "FILE"), " ")
}

// writeMarkdown writes the blocks of what ran to file.
func (r *results) writeMarkdown(file, by string) error {
	blocks, err := r.blocks(by)
	if err != nil {
		return err
	}
	if len(blocks) == 0 {
		return fmt.Errorf("-markdown %s: none of the benchmarks that ran has a README block", file)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := readmegen.Write(f, blocks...); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// blocks are the README's blocks of what ran, as the README holds them.
func (r *results) blocks(by string) ([]readmegen.Block, error) {
	var out []readmegen.Block
	if rows, after := r.figureRows(); len(rows) > 0 {
		content := readmegen.Table([]string{"", "gcsfuse-csi", incumbentFiguresHead}, rows...)
		if after != "" {
			content += "\n" + after
		}
		b, err := readmegen.New(blockFigures, by, content)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if r.rss != nil {
		var rows [][]string
		for _, p := range r.rss.phases {
			rows = append(rows, []string{p.name, fmt.Sprintf("%.1f MiB", p.gcsfuse), fmt.Sprintf("%.1f MiB", p.sidecar),
				fmt.Sprintf("%.0f-%.0f m", 1000*p.cpuLo, 1000*p.cpuHi)})
		}
		b, err := readmegen.New(blockRSS, by, readmegen.Table([]string{"phase", "gcsfuse RSS", "sidecar RSS", "CPU"}, rows...))
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if d := r.datapath; d != nil && len(d.modes) == 3 {
		var rows [][]string
		for _, row := range d.rows {
			rows = append(rows, []string{row.name, row.cell(0), row.cell(1), row.cell(2),
				fmt.Sprintf("%.2f", row.medians[1]/row.medians[0]), fmt.Sprintf("%.2f", row.medians[2]/row.medians[0])})
		}
		content := readmegen.Table([]string{fmt.Sprintf("workload (median of %d, ± half the spread)", d.rounds),
			d.modes[0], d.modes[1], d.modes[2], d.modes[1] + " / " + d.modes[0], d.modes[2] + " / " + d.modes[0]}, rows...)
		b, err := readmegen.New(blockDatapath, by, content)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// figureRows are the rows of "Measured here" and the sentence under the table.
func (r *results) figureRows() (rows [][]string, after string) {
	for _, m := range r.mount {
		if len(m.s) == 0 {
			continue
		}
		if m.volumes == 1 {
			rows = append(rows, []string{fmt.Sprintf("NodePublishVolume -> first `stat` through the mount, 1 volume (n=%d)", len(m.s)),
				quantiles(m.s), incumbentMountOne})
			after = fmt.Sprintf("The fastest 1-volume round took %s.", short(m.s.at(0)))
			continue
		}
		rows = append(rows, []string{fmt.Sprintf("same, %d volumes in one pod, all ready (n=%d)", m.volumes, len(m.s)),
			quantiles(m.s), fmt.Sprintf("~%.0f s (%.1f s sleep each)", incumbentMountSleep*float64(m.volumes), incumbentMountSleep)})
	}
	if len(r.mountAlone) > 0 {
		rows = append(rows, []string{fmt.Sprintf("standalone gcsfuse on the same emulator, mounting itself, exec -> first `stat` (n=%d)", len(r.mountAlone)),
			quantiles(r.mountAlone), ""})
	}
	if len(r.mountPhases) == len(mountPhases) {
		var parts []string
		for i, p := range mountPhases {
			parts = append(parts, fmt.Sprintf("%s %.1f ms", p.short, ms(r.mountPhases[i])))
		}
		after += " Where a 1-volume round's time goes (p50 of each step): " + strings.Join(parts, "; ") + "."
	}
	for _, e := range r.exit {
		if len(e.s) == 0 {
			continue
		}
		label, incumbent := "native: SIGTERM -> sidecar exit", incumbentNativeExit
		if e.mode == contract.ModeLegacy {
			label, incumbent = "legacy: exit file -> sidecar exit", incumbentLegacyExit
		}
		rows = append(rows, []string{fmt.Sprintf("%s (n=%d)", label, len(e.s)), quantiles(e.s), incumbent})
	}
	if d := r.dataLoss; d != nil && len(d.s) > 0 {
		rows = append(rows, []string{
			fmt.Sprintf("data loss: 4 writer processes close and exit, then the trigger, %d iterations", d.iterations),
			fmt.Sprintf("%d of %d objects missing or short; trigger -> exit %s", d.missing, d.objects, quantiles(d.s)), ""})
	}
	if w := r.writing; w != nil && len(w.on) > 0 {
		rows = append(rows, w.row())
	}
	if len(r.throughput) > 0 {
		t := r.throughput[0]
		label := fmt.Sprintf("%d MiB sequential, ours / standalone gcsfuse dir mount, medians of %d", t.sizeMiB, t.rounds)
		if len(r.throughput) > 1 {
			label += fmt.Sprintf("; %d runs back to back", len(r.throughput))
		}
		var ws, rs []string
		for _, t := range r.throughput {
			ws = append(ws, fmt.Sprintf("%.1f / %.1f MiB/s (%.2f)", t.write[0], t.write[1], t.write[0]/t.write[1]))
			rs = append(rs, fmt.Sprintf("%.1f / %.1f MiB/s (%.2f)", t.read[0], t.read[1], t.read[0]/t.read[1]))
		}
		rows = append(rows, []string{label, "write " + strings.Join(ws, " and ") + "; cold read " + strings.Join(rs, " and "), ""})
	}
	return rows, after
}

// row is the data-loss-while-writing row: the scenarios that end on the exit file by the
// range of their medians (the writers finishing their files), those without one each by
// its own (the drain's deadline), then the losses with the drain off.
func (w *writingResult) row() []string {
	var names []string
	objects, lost := 0, 0
	var lo, hi time.Duration
	withFile := 0
	var deadline []string
	for _, s := range w.on {
		names = append(names, s.sc.short)
		objects += s.objects
		lost += s.lost
		p50 := s.s.at(0.5)
		if !s.sc.exitFile {
			deadline = append(deadline, fmt.Sprintf(", %s for %s", short(p50), s.sc.short))
			continue
		}
		if withFile == 0 || p50 < lo {
			lo = p50
		}
		if withFile == 0 || p50 > hi {
			hi = p50
		}
		withFile++
	}
	figures := fmt.Sprintf("%d of %d objects lost or short; trigger -> exit p50 %s (the writers finishing their files)%s",
		lost, objects, shortRange(lo, hi), strings.Join(deadline, ""))
	if len(w.off) > 0 {
		offObjects, offLost := 0, 0
		for _, s := range w.off {
			offObjects += s.objects
			offLost += s.lost
		}
		figures += fmt.Sprintf("; the same with the drain off (`--drain=false`, %d iterations each of the first %d): %d of %d lost",
			w.offIterations, len(w.off), offLost, offObjects)
	}
	label := fmt.Sprintf("data loss while writing: %d writer processes are mid-file when the trigger arrives (%s), %d iterations",
		drainWriters, strings.Join(names, ", "), w.perScenario*len(w.on))
	return []string{label, figures, ""}
}

// quantiles is "p50 X, p90 Y, max Z" of s.
func quantiles(s stats) string {
	return fmt.Sprintf("p50 %s, p90 %s, max %s", short(s.at(0.5)), short(s.at(0.9)), short(s.at(1)))
}

// short is a duration as the README prints it: whole milliseconds below a second, else
// seconds to the hundredth.
func short(d time.Duration) string {
	if d < time.Second-time.Millisecond/2 { // 999.6 ms is "1.00 s", not "1000 ms"
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// shortRange is "lo-hi" with one unit where both are below a second.
func shortRange(lo, hi time.Duration) string {
	switch {
	case short(lo) == short(hi):
		return short(lo)
	case strings.HasSuffix(short(hi), " ms"):
		return fmt.Sprintf("%.0f-%s", float64(lo)/float64(time.Millisecond), short(hi))
	default:
		return short(lo) + "-" + short(hi)
	}
}
