package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/readmegen"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// sample is n samples whose min, p50, p90 and max (as stats.at picks them) are the given
// milliseconds.
func sample(n int, minMs, p50, p90, maxMs float64) stats {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	s := make(stats, n)
	for i := range s {
		switch {
		case i == 0:
			s[i] = ms(minMs)
		case i <= n/2:
			s[i] = ms(p50)
		case i < n-1:
			s[i] = ms(p90)
		default:
			s[i] = ms(maxMs)
		}
	}
	return s
}

// The README's blocks as -markdown writes them, from figures of every benchmark.
func TestMarkdownBlocks(t *testing.T) {
	on := func(i int, p50 float64) scenarioResult {
		return scenarioResult{sc: drainScenarios[i], objects: 200, s: sample(50, p50, p50, p50, p50)}
	}
	r := results{
		mount:      []mountResult{{1, sample(20, 47, 105, 159, 200)}, {8, sample(20, 300, 385, 409, 410)}},
		mountAlone: sample(20, 76, 139, 186, 234),
		mountPhases: []time.Duration{1700 * time.Microsecond, 28400 * time.Microsecond, 7 * time.Millisecond,
			70 * time.Millisecond, 11 * time.Millisecond, 2 * time.Millisecond},
		exit:     []exitResult{{contract.ModeNative, sample(20, 10, 19, 25, 27)}, {contract.ModeLegacy, sample(20, 10, 17, 27, 32)}},
		dataLoss: &dataLossResult{iterations: 200, objects: 800, s: sample(200, 10, 21, 27, 37)},
		writing: &writingResult{perScenario: 50, offIterations: 10,
			on: []scenarioResult{on(0, 258), on(1, 297), on(2, 4030), on(3, 270)},
			off: []scenarioResult{{sc: drainScenarios[0], objects: 40, lost: 40, s: sample(10, 1, 1, 1, 1)},
				{sc: drainScenarios[1], objects: 40, lost: 40, s: sample(10, 1, 1, 1, 1)}}},
		throughput: []throughputResult{{256, 5, [2]float64{45.2, 56.3}, [2]float64{336.5, 331.3}},
			{256, 5, [2]float64{57.2, 56.1}, [2]float64{380.7, 338.2}}},
		rss: &rssResult{phases: []rssPhase{{"idle, 1 s after ready", 40.4, 13.0, 0, 0.010}, {"streaming write", 110.94, 13.01, 0.093, 0.112}}},
	}
	blocks, err := r.blocks("go run ./test/bench -markdown FILE")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := readmegen.Write(&out, blocks...); err != nil {
		t.Fatal(err)
	}
	want := "<!-- BEGIN GENERATED: bench (by go run ./test/bench -markdown FILE) -->\n\n" +
		"| | gcsfuse-csi | incumbent (GKE driver, measured) |\n" +
		"|---|---|---|\n" +
		"| NodePublishVolume -> first `stat` through the mount, 1 volume (n=20) | p50 105 ms, p90 159 ms, max 200 ms | 1.69-1.76 s |\n" +
		"| same, 8 volumes in one pod, all ready (n=20) | p50 385 ms, p90 409 ms, max 410 ms | ~12 s (1.5 s sleep each) |\n" +
		"| standalone gcsfuse on the same emulator, mounting itself, exec -> first `stat` (n=20) | p50 139 ms, p90 186 ms, max 234 ms | |\n" +
		"| native: SIGTERM -> sidecar exit (n=20) | p50 19 ms, p90 25 ms, max 27 ms | 5.02 s |\n" +
		"| legacy: exit file -> sidecar exit (n=20) | p50 17 ms, p90 27 ms, max 32 ms | 5.5-9.5 s after its exit file (+ republish delay) |\n" +
		"| data loss: 4 writer processes close and exit, then the trigger, 200 iterations | 0 of 800 objects missing or short; trigger -> exit p50 21 ms, p90 27 ms, max 37 ms | |\n" +
		"| data loss while writing: 4 writer processes are mid-file when the trigger arrives (native SIGTERM during the init phase, legacy deletion, `--grace-period` 4 > spec 1 s with no exit file, deadline kill), 200 iterations | 0 of 800 objects lost or short; trigger -> exit p50 258-297 ms (the writers finishing their files), 4.03 s for `--grace-period` 4 > spec 1 s with no exit file; the same with the drain off (`--drain=false`, 10 iterations each of the first 2): 80 of 80 lost | |\n" +
		"| 256 MiB sequential, ours / standalone gcsfuse dir mount, medians of 5; 2 runs back to back | write 45.2 / 56.3 MiB/s (0.80) and 57.2 / 56.1 MiB/s (1.02); cold read 336.5 / 331.3 MiB/s (1.02) and 380.7 / 338.2 MiB/s (1.13) | |\n" +
		"\nThe fastest 1-volume round took 47 ms. Where a 1-volume round's time goes (p50 of each step): NodePublishVolume 1.7 ms; " +
		"the sidecar's start 28.4 ms; hand-off, bucket check, gcsfuse's exec and memory limit 7.0 ms; gcsfuse's own start (exec to its first log line) 70.0 ms; " +
		"gcsfuse's set-up to \"successfully mounted\" 11.0 ms; the first stat 2.0 ms.\n\n" +
		"<!-- END GENERATED: bench -->\n\n" +
		"<!-- BEGIN GENERATED: bench-rss (by go run ./test/bench -markdown FILE) -->\n\n" +
		"| phase | gcsfuse RSS | sidecar RSS | CPU |\n" +
		"|---|---|---|---|\n" +
		"| idle, 1 s after ready | 40.4 MiB | 13.0 MiB | 0-10 m |\n" +
		"| streaming write | 110.9 MiB | 13.0 MiB | 93-112 m |\n" +
		"\n<!-- END GENERATED: bench-rss -->\n"
	if got := out.String(); got != want {
		t.Errorf("blocks:\n%s\nwant:\n%s", got, want)
	}

	// Only what ran: no throughput, no rss, no second block.
	r = results{exit: r.exit}
	blocks, err = r.blocks("x")
	if err != nil || len(blocks) != 1 || strings.Contains(blocks[0].Body, "MiB") || !strings.Contains(blocks[0].Body, "legacy: exit file") {
		t.Errorf("exit only: %+v, %v", blocks, err)
	}
}

func TestShort(t *testing.T) {
	for d, want := range map[time.Duration]string{
		104600 * time.Microsecond: "105 ms",
		999600 * time.Microsecond: "1.00 s",
		4031 * time.Millisecond:   "4.03 s",
	} {
		if got := short(d); got != want {
			t.Errorf("short(%s) = %q, want %q", d, got, want)
		}
	}
	if got := shortRange(258*time.Millisecond, 297*time.Millisecond); got != "258-297 ms" {
		t.Errorf("shortRange = %q", got)
	}
	if got := shortRange(900*time.Millisecond, 1200*time.Millisecond); got != "900 ms-1.20 s" {
		t.Errorf("shortRange across a second = %q", got)
	}
}

// The data path's block: each workload's medians per mode, ± half the spread, and the ratios
// to standalone gcsfuse.
func TestDatapathBlock(t *testing.T) {
	r := results{datapath: &datapathResult{rounds: 3, modes: []string{"standalone", "sidecar", "shared"}, rows: []datapathRow{
		{name: "sequential read, cold", unit: "MiB/s", medians: []float64{320, 304, 336}, spread: []float64{0.1, 0.2, 0}},
	}}}
	blocks, err := r.blocks("x")
	if err != nil || len(blocks) != 1 {
		t.Fatalf("blocks %+v, %v", blocks, err)
	}
	want := "| workload (median of 3, ± half the spread) | standalone | sidecar | shared | sidecar / standalone | shared / standalone |\n" +
		"|---|---|---|---|---|---|\n" +
		"| sequential read, cold | 320 MiB/s ±5% | 304 MiB/s ±10% | 336 MiB/s ±0% | 0.95 | 1.05 |\n"
	if blocks[0].Name != blockDatapath || !strings.Contains(blocks[0].Body, want) {
		t.Errorf("block %s:\n%s\nwant it to hold:\n%s", blocks[0].Name, blocks[0].Body, want)
	}
}
