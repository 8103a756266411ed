package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// rssSampleInterval is how often the gcsfuse and sidecar RSS are sampled during a phase.
const rssSampleInterval = 20 * time.Millisecond

// rss measures the memory of one volume's gcsfuse and of the sidecar: idle after the mount,
// during a streaming (sequential) write of sizeMiB, and during a cold read of it through the
// file cache. The sidecar's default requests and limits are derived from these figures
// (docs/performance.md, "Sidecar resources").
func (b *bench) rss(sizeMiB, rounds int) error {
	fmt.Printf("## memory of one volume: gcsfuse and sidecar RSS (MiB), %d MiB file, %d rounds; max of 20 ms samples per phase\n", sizeMiB, rounds)
	phases := []string{"idle (1 s after ready)", "streaming write", "read with file cache (cold)", "read again (cache hit)"}
	// The same phases as the README's table names them.
	readme := map[string]string{phases[0]: "idle, 1 s after ready", phases[1]: "streaming write",
		phases[2]: "cold read through the file cache", phases[3]: "read again (file cache hit)"}
	gf := map[string][]float64{}
	sc := map[string][]float64{}
	cpu := map[string][]float64{} // cores: CPU seconds of gcsfuse and sidecar per wall second
	for range rounds {
		e, err := b.env()
		if err != nil {
			return err
		}
		pod, err := e.NewPod()
		if err != nil {
			e.Close()
			return err
		}
		cacheDir := filepath.Join(b.dir, "cache-"+pod.UID)
		if err := os.MkdirAll(cacheDir, 0o777); err != nil {
			e.Close()
			return err
		}
		_ = os.Chmod(cacheDir, 0o777)
		if err := pod.Publish(ctx(), "data", b.bucket(), "file-cache-max-size-mb="+strconv.Itoa(2*sizeMiB), false); err != nil {
			e.Close()
			return err
		}
		side, err := pod.StartSidecarWith(testenv.SidecarOptions{Mode: contract.ModeNative, GraceSeconds: 30, Args: []string{"--cache-dir=" + cacheDir}})
		if err != nil {
			e.Close()
			return err
		}
		target := pod.Target("data")
		if _, err := testenv.WaitReady(target, 20*time.Second); err != nil {
			e.Close()
			return err
		}
		pids := pod.GcsfusePIDs()
		if len(pids) != 1 {
			e.Close()
			return fmt.Errorf("want one gcsfuse, got %v", pids)
		}
		measure := func(phase string, work func() error) error {
			c0, t0 := cpuSeconds(pids[0])+cpuSeconds(side.Cmd.Process.Pid), time.Now()
			g, s, err := peakRSS(pids[0], side.Cmd.Process.Pid, work)
			gf[phase] = append(gf[phase], g)
			sc[phase] = append(sc[phase], s)
			cpu[phase] = append(cpu[phase], (cpuSeconds(pids[0])+cpuSeconds(side.Cmd.Process.Pid)-c0)/time.Since(t0).Seconds())
			return err
		}
		path := filepath.Join(target, "big.bin")
		err = measure(phases[0], func() error { time.Sleep(time.Second); return nil })
		if err == nil {
			err = measure(phases[1], func() error { _, err := timeIO(path, int64(sizeMiB)<<20, true); return err })
		}
		if err == nil {
			dropFileCache(path)
			err = measure(phases[2], func() error { _, err := timeIO(path, int64(sizeMiB)<<20, false); return err })
		}
		if err == nil {
			dropFileCache(path)
			err = measure(phases[3], func() error { _, err := timeIO(path, int64(sizeMiB)<<20, false); return err })
		}
		e.Close()
		os.RemoveAll(cacheDir)
		if err != nil {
			return err
		}
	}
	res := &rssResult{}
	for _, p := range phases {
		fmt.Printf("  %-28s gcsfuse %s   sidecar %s   CPU %.0f-%.0f millicores\n", p, mib(gf[p]), mib(sc[p]), 1000*slices.Min(cpu[p]), 1000*slices.Max(cpu[p]))
		res.phases = append(res.phases, rssPhase{name: readme[p], gcsfuse: slices.Max(gf[p]), sidecar: slices.Max(sc[p]),
			cpuLo: slices.Min(cpu[p]), cpuHi: slices.Max(cpu[p])})
	}
	b.res.rss = res
	return nil
}

func mib(v []float64) string {
	lo, hi := v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return fmt.Sprintf("max %.1f (min of rounds %.1f)", hi, lo)
}

// peakRSS runs work while sampling the RSS of two processes, and returns their peaks in MiB.
func peakRSS(pidA, pidB int, work func() error) (float64, float64, error) {
	var a, b float64
	var mu sync.Mutex
	stop := make(chan struct{})
	done := make(chan struct{})
	sample := func() {
		x, y := rssMiB(pidA), rssMiB(pidB)
		mu.Lock()
		a, b = max(a, x), max(b, y)
		mu.Unlock()
	}
	go func() { // ends when stop is closed
		defer close(done)
		t := time.NewTicker(rssSampleInterval)
		defer t.Stop()
		for {
			sample()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	err := work()
	close(stop)
	<-done
	sample()
	return a, b, err
}

func rssMiB(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds is the user+system CPU time of pid (clock ticks of 10 ms).
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// dropFileCache drops the kernel's cached pages of one file, so the next read goes to gcsfuse.
func dropFileCache(path string) {
	if f, err := os.Open(path); err == nil {
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
}
