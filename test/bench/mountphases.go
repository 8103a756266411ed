package main

import (
	"bufio"
	"fmt"
	"strings"
	"time"
)

// mountPhase names one step of a volume's way from NodePublishVolume to the first stat that
// returns, in the order they happen. Each is measured from the end of the one before.
type mountPhase struct {
	name string
	// short names it in the docs' sentence.
	short string
	// mark is what ends the phase in the sidecar's log: a substring of the line (the
	// sidecar's own msg="...", or gcsfuse's line as the sidecar relays it); "" for phases
	// the bench times itself.
	mark string
}

// mountPhases: where a one-volume mount's time goes. The sidecar's and gcsfuse's lines carry
// the sidecar's clock (slog's millisecond time=; gcsfuse's as the sidecar relays them), the
// bench's marks its own: one machine, one clock.
var mountPhases = []mountPhase{
	{"NodePublishVolume (the node plugin: /dev/fuse mounted, offer made)", "NodePublishVolume", ""},
	{"sidecar process start -> \"sidecar ready\"", "the sidecar's start", `msg="sidecar ready"`},
	{"hand-off, bucket check, gcsfuse's exec and memory limit", "hand-off, bucket check, gcsfuse's exec and memory limit", `msg="gcsfuse started"`},
	{"gcsfuse's start -> its first log line", "gcsfuse's own start (exec to its first log line)", `msg="Start gcsfuse/`},
	{"gcsfuse's set-up -> \"successfully mounted\"", "gcsfuse's set-up to \"successfully mounted\"", `File system has been successfully mounted`},
	{"-> first stat through the mount returns", "the first stat", ""},
}

// mountTimeline is one round's marks: publishDone and sidecarStart from the bench, the rest
// from the sidecar's output, ready when the stat returned.
type mountTimeline struct {
	t0, publishDone, sidecarStart, ready time.Time
	output                               string
}

// phases splits a round into mountPhases' durations; ok is false when a mark is missing.
func (m mountTimeline) phases() ([]time.Duration, bool) {
	marks := []time.Time{m.t0, m.publishDone}
	for _, p := range mountPhases[1 : len(mountPhases)-1] {
		at, ok := logTime(m.output, p.mark)
		if !ok {
			return nil, false
		}
		marks = append(marks, at)
	}
	marks = append(marks, m.ready)
	out := make([]time.Duration, 0, len(mountPhases))
	for i := 1; i < len(marks); i++ {
		from := marks[i-1]
		if i == 2 { // the sidecar's start is timed from its exec, not from the publish
			from = m.sidecarStart
		}
		out = append(out, marks[i].Sub(from))
	}
	return out, true
}

// logTime is the time= of the first line of out that contains mark.
func logTime(out, mark string) (time.Time, bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, mark) {
			continue
		}
		f, _, _ := strings.Cut(line, " ")
		v, ok := strings.CutPrefix(f, "time=")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			continue
		}
		return at, true
	}
	return time.Time{}, false
}

// printPhases prints each phase's p50 and p90 over the rounds that had every mark, and
// returns the p50s (nil when no round had every mark).
func printPhases(rounds []mountTimeline) []time.Duration {
	per := make([]stats, len(mountPhases))
	for _, r := range rounds {
		ds, ok := r.phases()
		if !ok {
			continue
		}
		for i, d := range ds {
			per[i] = append(per[i], d)
		}
	}
	fmt.Printf("  where 1 volume's time goes (%d of %d rounds had every mark; the sidecar logs in ms):\n", len(per[0]), len(rounds))
	for i, p := range mountPhases {
		if len(per[i]) == 0 {
			continue
		}
		fmt.Printf("    %-62s p50 %6.1f ms  p90 %6.1f ms\n", p.name, ms(per[i].at(0.5)), ms(per[i].at(0.9)))
	}
	if len(per[0]) == 0 {
		return nil
	}
	p50s := make([]time.Duration, len(per))
	for i := range per {
		p50s[i] = per[i].at(0.5)
	}
	return p50s
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
