// Command bench measures the data path and the sidecar lifecycle on this machine with the
// real node plugin, sidecar, gcsfuse and emulator, and prints figures. It asserts nothing:
// ratios are measured side by side in one run, because machines are noisy.
//
//	go run ./test/bench                      # everything
//	go run ./test/bench -only mount,exit     # some
//	go run ./test/bench -only rss            # gcsfuse and sidecar memory per volume
//	go run ./test/bench -rounds 20 -throughput-runs 2 -markdown /tmp/bench.md   # docs/performance.md's blocks too
//
// -markdown FILE also writes the figures as docs/performance.md holds them, as generated blocks
// (internal/readmegen) that go run ./hack/readme -file docs/performance.md < FILE splices there.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

func main() {
	only := flag.String("only", "mount,exit,dataloss,writing,throughput", "comma-separated: mount, exit, dataloss (writers closed their files), writing (writers mid-file at the trigger), throughput, rss (gcsfuse and sidecar memory: idle, streaming write, read with file cache), datapath (the workloads users run, standalone gcsfuse, sidecar and shared mode side by side; not in the default)")
	rounds := flag.Int("rounds", 10, "rounds for latency figures")
	iterations := flag.Int("dataloss-iterations", 200, "iterations of each data-loss check")
	offIterations := flag.Int("dataloss-off-iterations", 10, "writing: iterations per scenario with the sidecar's drain switched off")
	sizeMiB := flag.Int("throughput-mib", 256, "file size for the throughput comparison")
	tpRounds := flag.Int("throughput-rounds", 5, "rounds of the throughput comparison (medians are printed)")
	tpRuns := flag.Int("throughput-runs", 1, "throughput comparisons back to back (each printed: the machine is noisy)")
	var dp datapathConfig
	flag.IntVar(&dp.largeMiB, "datapath-large-mib", 256, "datapath: the sequential and random-read file's size (1024 failed on 2026-12-07: standalone gcsfuse's close got ESTALE, the emulator rehashing the whole object at each resumable chunk)")
	flag.IntVar(&dp.randOps, "datapath-random-reads", 2000, "datapath: random 4 KiB reads (a tenth as many 1 MiB reads)")
	flag.IntVar(&dp.smallFiles, "datapath-small-files", 10000, "datapath: files of the small-file workload")
	flag.IntVar(&dp.listObjs, "datapath-list-objects", 10000, "datapath: objects of the listed directory")
	flag.IntVar(&dp.ckptFiles, "datapath-checkpoint-files", 8, "datapath: files of the checkpoint-shaped write")
	flag.IntVar(&dp.ckptMiB, "datapath-checkpoint-mib", 64, "datapath: size of each checkpoint file")
	flag.IntVar(&dp.modelFiles, "datapath-model-files", 4, "datapath: files of the model-load-shaped read")
	flag.IntVar(&dp.modelMiB, "datapath-model-mib", 128, "datapath: size of each model file")
	flag.IntVar(&dp.rounds, "datapath-rounds", 3, "datapath: rounds (medians and spreads are printed)")
	markdown := flag.String("markdown", "", "also write the figures as docs/performance.md's generated blocks to this file, when every benchmark that ran succeeded (go run ./hack/readme -file docs/performance.md < FILE)")
	flag.Parse()
	if miss := testenv.Prereqs(); miss != "" {
		fmt.Fprintln(os.Stderr, "bench needs:", miss)
		os.Exit(1)
	}
	b, err := newBench()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer b.close()
	failed := false
	for _, what := range strings.Split(*only, ",") {
		var err error
		switch strings.TrimSpace(what) {
		case "mount":
			err = b.mountLatency(*rounds)
		case "exit":
			err = b.exitLatency(*rounds)
		case "dataloss":
			err = b.dataLoss(*iterations)
		case "writing":
			err = b.dataLossWriting(*iterations, *offIterations)
		case "throughput":
			for i := 0; i < *tpRuns && err == nil; i++ {
				err = b.throughput(*sizeMiB, *tpRounds)
			}
		case "rss":
			err = b.rss(*sizeMiB, *tpRounds)
		case "datapath":
			err = b.datapath(dp)
		default:
			err = fmt.Errorf("unknown benchmark %q", what)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
			failed = true
		}
	}
	if failed {
		if *markdown != "" {
			fmt.Fprintf(os.Stderr, "bench: %s not written: a benchmark failed\n", *markdown)
		}
		b.close() // os.Exit skips the deferred one: the emulator and the work directory go here
		os.Exit(1)
	}
	if *markdown != "" {
		if err := b.res.writeMarkdown(*markdown, byCommand()); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			b.close()
			os.Exit(1)
		}
	}
}

type bench struct {
	emu        *emulator.Server
	sidecarBin string
	dir        string
	bucketN    int
	// res keeps the figures for -markdown.
	res results
}

func newBench() (*bench, error) {
	dir, err := os.MkdirTemp("", "gcsfuse-csi-bench-")
	if err != nil {
		return nil, err
	}
	_ = os.Chmod(dir, 0o755)
	b := &bench{dir: dir, sidecarBin: filepath.Join(dir, "gcsfuse-sidecar")}
	if err := testenv.BuildSidecar(b.sidecarBin); err != nil {
		return nil, err
	}
	if b.emu, err = emulator.Start("127.0.0.1", 0); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	if b.emu != nil {
		b.emu.Stop()
	}
	if left, _ := fusemount.MountsUnder(b.dir); len(left) == 0 {
		os.RemoveAll(b.dir)
	}
}

func (b *bench) bucket() string {
	b.bucketN++
	name := fmt.Sprintf("bench-%d", b.bucketN)
	b.emu.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: name})
	return name
}

func (b *bench) env() (*testenv.Env, error) {
	return testenv.New(testenv.Options{Emulator: b.emu, SidecarBin: b.sidecarBin, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// ctx bounds one CSI call.
func ctx() context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	time.AfterFunc(time.Minute, cancel)
	return c
}

type stats []time.Duration

// at is the q quantile of s (q in [0, 1]; 1 is the max), the one the text and the Markdown
// both print. s must not be empty.
func (s stats) at(q float64) time.Duration {
	c := slices.Clone(s)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[min(len(c)-1, int(q*float64(len(c))))]
}

func (s stats) String() string {
	if len(s) == 0 {
		return "no samples"
	}
	r := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	return fmt.Sprintf("min %s  p50 %s  p90 %s  p99 %s  max %s  (n=%d)", r(s.at(0)), r(s.at(0.5)), r(s.at(0.9)), r(s.at(0.99)), r(s.at(1)), len(s))
}

// mountLatency: NodePublishVolume of every volume, sidecar start, until a stat through
// every mount succeeds; the order a native sidecar sees (volumes first, then containers).
func (b *bench) mountLatency(rounds int) error {
	fmt.Println("## mount-ready latency: NodePublishVolume -> first successful stat through every mount")
	for _, n := range []int{1, 8} {
		var s stats
		var timelines []mountTimeline
		for range rounds {
			tl, err := b.mountOnce(n)
			if err != nil {
				return err
			}
			s = append(s, tl.ready.Sub(tl.t0))
			timelines = append(timelines, tl)
		}
		fmt.Printf("  %d volume(s): %s\n", n, s)
		if n == 1 {
			b.res.mountPhases = printPhases(timelines)
		}
		b.res.mount = append(b.res.mount, mountResult{volumes: n, s: s})
	}
	var alone stats
	for range rounds {
		d, err := b.standaloneMountOnce()
		if err != nil {
			return err
		}
		alone = append(alone, d)
	}
	fmt.Printf("  standalone gcsfuse on the same emulator, mounting itself, exec -> first stat: %s\n", alone)
	b.res.mountAlone = alone
	fmt.Println("  (incumbent: sleeps 1.5 s before each volume; measured 1.69-1.76 s for one)")
	return nil
}

// standaloneMountOnce times gcsfuse alone, as root on a directory (it mounts /dev/fuse
// itself), with the flags our sidecar gives it against the emulator: exec -> the first stat
// through the mount returns. Not the same path as ours: it mounts /dev/fuse itself (ours is
// mounted by the node plugin), without our environment, metrics port and memory limit.
func (b *bench) standaloneMountOnce() (time.Duration, error) {
	dir, err := os.MkdirTemp(b.dir, "standalone-mount-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	mnt, tmp := filepath.Join(dir, "mnt"), filepath.Join(dir, "tmp")
	for _, d := range []string{mnt, tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return 0, err
		}
	}
	bucket := b.bucket()
	t0 := time.Now()
	stop, err := b.startStandalone(bucket, mnt, tmp)
	if err != nil {
		return 0, err
	}
	defer stop()
	if _, err := waitMountedEvery(mnt, 20*time.Second, 2*time.Millisecond); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// mountOnce publishes n volumes of a new pod and starts its sidecar; the timeline ends when a
// stat through every mount has returned.
func (b *bench) mountOnce(n int) (mountTimeline, error) {
	var tl mountTimeline
	e, err := b.env()
	if err != nil {
		return tl, err
	}
	defer e.Close()
	pod, err := e.NewPod()
	if err != nil {
		return tl, err
	}
	buckets := make([]string, n)
	for i := range buckets {
		buckets[i] = b.bucket()
		if err := os.MkdirAll(filepath.Dir(pod.Target(fmt.Sprintf("v%d", i))), 0o750); err != nil {
			return tl, err
		}
	}
	tl.t0 = time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n { // the kubelet sets volumes up in parallel
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- pod.Publish(ctx(), fmt.Sprintf("v%d", i), buckets[i], "", false)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return tl, err
		}
	}
	tl.publishDone = time.Now()
	tl.sidecarStart = time.Now()
	sc, err := pod.StartSidecar(contract.ModeNative, 30, nil)
	if err != nil {
		return tl, err
	}
	for i := range n {
		if _, err := testenv.WaitReady(pod.Target(fmt.Sprintf("v%d", i)), 20*time.Second); err != nil {
			return tl, fmt.Errorf("%v\n%s", err, sc.Output())
		}
	}
	tl.ready = time.Now()
	// gcsfuse's last lines may be relayed just after the stat returned: the breakdown waits
	// for them (untimed, bounded).
	for end := time.Now().Add(time.Second); !strings.Contains(sc.Output(), `msg="volume ready"`) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	tl.output = sc.Output()
	return tl, nil
}

// exitLatency: trigger -> sidecar exit, native (SIGTERM) and legacy (exit file), with a
// volume that has just been written to.
func (b *bench) exitLatency(rounds int) error {
	fmt.Println("## trigger -> sidecar exit (one volume, files just written and closed)")
	for _, mode := range []string{contract.ModeNative, contract.ModeLegacy} {
		var s stats
		for range rounds {
			d, _, err := b.exitOnce(mode, 2, 64<<10)
			if err != nil {
				return err
			}
			s = append(s, d)
		}
		trigger := "SIGTERM"
		if mode == contract.ModeLegacy {
			trigger = "exit file"
		}
		fmt.Printf("  %-6s (%s): %s\n", mode, trigger, s)
		b.res.exit = append(b.res.exit, exitResult{mode: mode, s: s})
	}
	fmt.Println("  (incumbent: native 5.02 s; legacy 5.5-9.5 s after its exit file)")
	return nil
}

// exitOnce mounts one volume, writes files from writers that close them, triggers the
// sidecar's exit and returns the latency and how many objects are missing or short.
func (b *bench) exitOnce(mode string, writers, size int) (time.Duration, int, error) {
	e, err := b.env()
	if err != nil {
		return 0, 0, err
	}
	defer e.Close()
	bucket := b.bucket()
	pod, err := e.NewPod()
	if err != nil {
		return 0, 0, err
	}
	if err := pod.Publish(ctx(), "data", bucket, "", false); err != nil {
		return 0, 0, err
	}
	sc, err := pod.StartSidecar(mode, 30, nil)
	if err != nil {
		return 0, 0, err
	}
	target := pod.Target("data")
	if _, err := testenv.WaitReady(target, 20*time.Second); err != nil {
		return 0, 0, err
	}
	want, err := writeWithProcesses(target, writers, size)
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if mode == contract.ModeNative {
		err = sc.Signal(syscall.SIGTERM)
	} else {
		err = podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "bench"})
	}
	if err != nil {
		return 0, 0, err
	}
	code, err := sc.Wait(10 * time.Second)
	if err != nil || code != 0 {
		return 0, 0, fmt.Errorf("sidecar exit %d, %v\n%s", code, err, sc.Output())
	}
	d := sc.Exited.Sub(t0)
	bad := 0
	for name, n := range want {
		o, err := b.emu.GetObject(bucket, name)
		if err != nil || len(o.Content) != n {
			bad++
		}
	}
	return d, bad, nil
}

// writeWithProcesses runs writers as separate processes that write a file through the
// mount, close it and exit, like an app container's last act.
func writeWithProcesses(dir string, writers, size int) (map[string]int, error) {
	want := map[string]int{}
	cmds := make([]*exec.Cmd, writers)
	for i := range writers {
		name := fmt.Sprintf("part-%03d.bin", i)
		want[name] = size
		cmds[i] = exec.Command("dd", "if=/dev/urandom", "of="+filepath.Join(dir, name), fmt.Sprintf("bs=%d", size), "count=1", "status=none")
		if err := cmds[i].Start(); err != nil {
			return nil, err
		}
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			return nil, fmt.Errorf("writer: %w", err)
		}
	}
	return want, nil
}

// dataLoss: writers exit, then the trigger, over many iterations alternating modes.
func (b *bench) dataLoss(iterations int) error {
	fmt.Printf("## data loss: 4 writer processes write, close and exit, then the exit trigger; %d iterations\n", iterations)
	missing, objects := 0, 0
	var s stats
	start := time.Now()
	for i := range iterations {
		mode := contract.ModeNative
		if i%2 == 1 {
			mode = contract.ModeLegacy
		}
		d, bad, err := b.exitOnce(mode, 4, 256<<10)
		if err != nil {
			return fmt.Errorf("iteration %d: %w", i, err)
		}
		missing += bad
		objects += 4
		s = append(s, d)
	}
	fmt.Printf("  iterations %d  objects %d  missing or short %d  (%.1f s)\n", iterations, objects, missing, time.Since(start).Seconds())
	fmt.Printf("  trigger -> exit over all iterations: %s\n", s)
	b.res.dataLoss = &dataLossResult{iterations: iterations, objects: objects, missing: missing, s: s}
	if missing > 0 {
		return fmt.Errorf("%d objects missing or short", missing)
	}
	return nil
}

// throughput: sequential write then read of one file through our mount (node plugin +
// sidecar + /dev/fd) and through a standalone gcsfuse directory mount, same emulator.
func (b *bench) throughput(sizeMiB, rounds int) error {
	fmt.Printf("## sequential throughput, %d MiB file, same emulator, side by side\n", sizeMiB)
	size := int64(sizeMiB) << 20
	e, err := b.env()
	if err != nil {
		return err
	}
	defer e.Close()
	pod, err := e.NewPod()
	if err != nil {
		return err
	}
	ours := b.bucket()
	if err := pod.Publish(ctx(), "data", ours, "", false); err != nil {
		return err
	}
	if _, err := pod.StartSidecar(contract.ModeNative, 30, nil); err != nil {
		return err
	}
	if _, err := testenv.WaitReady(pod.Target("data"), 20*time.Second); err != nil {
		return err
	}
	plainDir := filepath.Join(b.dir, "standalone")
	if err := os.MkdirAll(plainDir, 0o755); err != nil {
		return err
	}
	plain := b.bucket()
	tmp := filepath.Join(b.dir, "standalone-tmp")
	_ = os.MkdirAll(tmp, 0o755)
	stop, err := b.startStandalone(plain, plainDir, tmp)
	if err != nil {
		return err
	}
	defer stop()
	if _, err := waitMounted(plainDir, 20*time.Second); err != nil {
		return err
	}
	mounts := []struct{ name, dir string }{{"standalone gcsfuse", plainDir}, {"gcsfuse-csi", pod.Target("data")}}
	w := map[string][]float64{}
	r := map[string][]float64{}
	for round := range rounds {
		for k := range mounts {
			m := mounts[(k+round)%len(mounts)] // alternate who goes first
			path := filepath.Join(m.dir, fmt.Sprintf("big-%d.bin", round))
			ws, err := timeIO(path, size, true)
			if err != nil {
				return fmt.Errorf("%s write: %w", m.name, err)
			}
			if err := dropCaches(); err != nil { // a cold read: through gcsfuse from the emulator, not the page cache
				return err
			}
			rs, err := timeIO(path, size, false)
			if err != nil {
				return fmt.Errorf("%s read: %w", m.name, err)
			}
			w[m.name] = append(w[m.name], ws)
			r[m.name] = append(r[m.name], rs)
		}
	}
	for _, m := range mounts {
		fmt.Printf("  %-20s write %6.1f MiB/s   cold read %7.1f MiB/s   (medians of %d)\n", m.name, median(w[m.name]), median(r[m.name]), rounds)
	}
	o, p := "gcsfuse-csi", "standalone gcsfuse"
	fmt.Printf("  ratio ours/standalone: write %.2f  read %.2f\n", median(w[o])/median(w[p]), median(r[o])/median(r[p]))
	b.res.throughput = append(b.res.throughput, throughputResult{sizeMiB: sizeMiB, rounds: rounds,
		write: [2]float64{median(w[o]), median(w[p])}, read: [2]float64{median(r[o]), median(r[p])}})
	return nil
}

// startStandalone execs gcsfuse alone, as root, mounting bucket on dir itself, with the flags
// our sidecar gives it against the emulator (tmp its temp dir) and extra ones; stop unmounts
// it and ends the process. The caller waits for the mount.
func (b *bench) startStandalone(bucket, dir, tmp string, extra ...string) (stop func(), err error) {
	args := append([]string{"--foreground", "--anonymous-access", "--custom-endpoint=" + b.emu.Endpoint, "--temp-dir=" + tmp}, extra...)
	cmd := exec.Command(testenv.GcsfusePath(), append(args, bucket, dir)...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start standalone gcsfuse: %w", err)
	}
	return func() {
		_ = fusemount.Unmount(context.Background(), dir, time.Second)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}, nil
}

func waitMounted(dir string, d time.Duration) (time.Duration, error) {
	return waitMountedEvery(dir, d, 10*time.Millisecond)
}

// waitMountedEvery looks for dir in the mount table every poll, then stats through it.
func waitMountedEvery(dir string, d, poll time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(d)
	for {
		if m, _ := fusemount.Lookup(dir); m != nil {
			return testenv.WaitReady(dir, time.Until(deadline))
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s not mounted after %s", dir, d)
		}
		time.Sleep(poll)
	}
}

// timeIO writes (or reads) size bytes sequentially in 1 MiB blocks and returns MiB/s,
// including close (which uploads).
func timeIO(path string, size int64, write bool) (float64, error) {
	buf := make([]byte, 1<<20)
	t0 := time.Now()
	var f *os.File
	var err error
	if write {
		f, err = os.Create(path)
	} else {
		f, err = os.Open(path)
	}
	if err != nil {
		return 0, err
	}
	for done := int64(0); done < size; done += int64(len(buf)) {
		if write {
			_, err = f.Write(buf)
		} else {
			_, err = io.ReadFull(f, buf)
		}
		if err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return float64(size) / (1 << 20) / time.Since(t0).Seconds(), nil
}

func median(v []float64) float64 {
	c := slices.Clone(v)
	slices.Sort(c)
	return c[len(c)/2]
}

// dropCaches empties the page cache, so that the next read goes through gcsfuse; a figure
// called cold is not measured without it.
func dropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
		return fmt.Errorf("drop the page cache (a cold read needs root and a writable /proc/sys): %w", err)
	}
	return nil
}
