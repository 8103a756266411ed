package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// datapathConfig sizes the data-path workloads (flags of main).
type datapathConfig struct {
	largeMiB   int // the sequential and random-read file
	randOps    int // random 4 KiB reads; a tenth as many 1 MiB reads
	smallFiles int // files of the small-file workload
	listObjs   int // objects of the listed directory
	ckptFiles  int // files of the checkpoint-shaped write
	ckptMiB    int // size of each
	modelFiles int // files of the model-load-shaped read, read in parallel
	modelMiB   int // size of each
	rounds     int
}

// Bounds of the data-path benchmark's waits.
const (
	// datapathMountWait bounds a mount's readiness.
	datapathMountWait = 30 * time.Second
	// listingSetupParallel is how many objects of the listing are created at once, through
	// the emulator's API (not through a mount: the listing, not the creation, is measured).
	listingSetupParallel = 16
	smallFileSize        = 4 << 10
)

// dpMount is one way to the bucket: its name, the directory it is mounted on, and its bucket.
type dpMount struct {
	name, dir, bucket string
	// cache is gcsfuse's file cache directory ("" when the cache is off).
	cache string
}

// workload is one measured job; run returns its figure (higher is better) and the unit.
type workload struct {
	name, unit string
	// cached runs it on the mounts with gcsfuse's file cache on.
	cached bool
	run    func(m dpMount, round int) (float64, error)
}

// datapath runs each workload through standalone gcsfuse, the sidecar mode and the shared
// mode, on one emulator, the three alternating who goes first each round, and prints medians
// per mode and the ratio of each mode to standalone (the goal: >= 0.95).
func (b *bench) datapath(c datapathConfig) error {
	if c.rounds < 1 || c.largeMiB < 4 || c.randOps < 10 || c.smallFiles < 1 || c.listObjs < 1 || c.ckptFiles < 1 || c.ckptMiB < 1 || c.modelFiles < 1 || c.modelMiB < 1 {
		return fmt.Errorf("datapath: every -datapath-* figure must be at least 1 (-datapath-large-mib 4, -datapath-random-reads 10): %+v", c)
	}
	fmt.Printf("## data path: standalone gcsfuse, the sidecar mode and the shared mode side by side (%d rounds, medians)\n", c.rounds)
	mounts, stop, err := b.datapathMounts(0)
	if err != nil {
		return err
	}
	defer stop()
	cacheMiB := 2 * c.largeMiB
	cachedMounts, stopCached, err := b.datapathMounts(cacheMiB)
	if err != nil {
		return err
	}
	defer stopCached()
	for _, m := range mounts {
		if err := b.seedListing(m.bucket, c.listObjs); err != nil {
			return err
		}
	}
	large := int64(c.largeMiB) << 20
	wls := []workload{
		{"sequential write, 1 file", "MiB/s", false, func(m dpMount, r int) (float64, error) {
			return timeIO(filepath.Join(m.dir, fmt.Sprintf("large-%d.bin", r)), large, true)
		}},
		{"sequential read, cold", "MiB/s", false, func(m dpMount, r int) (float64, error) {
			if err := dropCaches(); err != nil {
				return 0, err
			}
			return timeIO(filepath.Join(m.dir, fmt.Sprintf("large-%d.bin", r)), large, false)
		}},
		{"random 4 KiB reads", "reads/s", false, func(m dpMount, r int) (float64, error) {
			if err := dropCaches(); err != nil {
				return 0, err
			}
			return randomReads(filepath.Join(m.dir, fmt.Sprintf("large-%d.bin", r)), large, 4<<10, c.randOps)
		}},
		{"random 1 MiB reads", "reads/s", false, func(m dpMount, r int) (float64, error) {
			if err := dropCaches(); err != nil {
				return 0, err
			}
			return randomReads(filepath.Join(m.dir, fmt.Sprintf("large-%d.bin", r)), large, 1<<20, max(1, c.randOps/10))
		}},
		{fmt.Sprintf("%d small files: create", c.smallFiles), "files/s", false, func(m dpMount, r int) (float64, error) {
			return smallFiles(filepath.Join(m.dir, fmt.Sprintf("small-%d", r)), c.smallFiles, "create")
		}},
		{fmt.Sprintf("%d small files: stat", c.smallFiles), "files/s", false, func(m dpMount, r int) (float64, error) {
			return smallFiles(filepath.Join(m.dir, fmt.Sprintf("small-%d", r)), c.smallFiles, "stat")
		}},
		{fmt.Sprintf("%d small files: read", c.smallFiles), "files/s", false, func(m dpMount, r int) (float64, error) {
			if err := dropCaches(); err != nil {
				return 0, err
			}
			return smallFiles(filepath.Join(m.dir, fmt.Sprintf("small-%d", r)), c.smallFiles, "read")
		}},
		{fmt.Sprintf("%d small files: delete", c.smallFiles), "files/s", false, func(m dpMount, r int) (float64, error) {
			return smallFiles(filepath.Join(m.dir, fmt.Sprintf("small-%d", r)), c.smallFiles, "delete")
		}},
		{fmt.Sprintf("list a directory of %d objects", c.listObjs), "lists/s", false, func(m dpMount, r int) (float64, error) {
			return listing(filepath.Join(m.dir, "listing"), c.listObjs)
		}},
		{fmt.Sprintf("file cache: re-read of a %d MiB file, cold page cache", c.largeMiB/4), "MiB/s", true, func(m dpMount, r int) (float64, error) {
			p := filepath.Join(m.dir, fmt.Sprintf("cached-%d.bin", r))
			if _, err := timeIO(p, large/4, true); err != nil {
				return 0, fmt.Errorf("write: %w", err)
			}
			// The first read fills the file cache: it must reach gcsfuse, not the page cache
			// the write left.
			if err := dropCaches(); err != nil {
				return 0, err
			}
			if _, err := timeIO(p, large/4, false); err != nil {
				return 0, fmt.Errorf("first read: %w", err)
			}
			if held := dirBytes(m.cache); held < large/4 {
				return 0, fmt.Errorf("the file cache %s holds %d bytes after the first read of a %d-byte file: the re-read would not be a cache hit", m.cache, held, large/4)
			}
			if err := dropCaches(); err != nil {
				return 0, err
			}
			return timeIO(p, large/4, false)
		}},
		{fmt.Sprintf("checkpoint: %d files x %d MiB, parallel, fsync", c.ckptFiles, c.ckptMiB), "MiB/s", false, func(m dpMount, r int) (float64, error) {
			return parallelFiles(filepath.Join(m.dir, fmt.Sprintf("ckpt-%d", r)), c.ckptFiles, int64(c.ckptMiB)<<20, true)
		}},
		{fmt.Sprintf("model load: %d files x %d MiB, parallel, cold", c.modelFiles, c.modelMiB), "MiB/s", false, func(m dpMount, r int) (float64, error) {
			dir := filepath.Join(m.dir, fmt.Sprintf("model-%d", r))
			if _, err := parallelFiles(dir, c.modelFiles, int64(c.modelMiB)<<20, true); err != nil {
				return 0, fmt.Errorf("write the model: %w", err)
			}
			if err := dropCaches(); err != nil {
				return 0, err
			}
			return parallelFiles(dir, c.modelFiles, int64(c.modelMiB)<<20, false)
		}},
	}
	// figures[workload][mount] are the rounds' figures.
	figures := make([]map[string][]float64, len(wls))
	for i := range figures {
		figures[i] = map[string][]float64{}
	}
	for round := range c.rounds {
		for i, w := range wls {
			set := mounts
			if w.cached {
				set = cachedMounts
			}
			for k := range set {
				m := set[(k+round+i)%len(set)] // who goes first turns
				v, err := w.run(m, round)
				if err != nil {
					return fmt.Errorf("%s through %s: %w", w.name, m.name, err)
				}
				figures[i][m.name] = append(figures[i][m.name], v)
			}
		}
		// The round's files go, so that the emulator's memory holds one round at a time.
		for _, m := range append(mounts, cachedMounts...) {
			if err := b.emptyBucket(m.bucket, "listing/"); err != nil {
				return err
			}
		}
	}
	res := datapathResult{rounds: c.rounds, modes: []string{mounts[0].name, mounts[1].name, mounts[2].name}}
	fmt.Printf("  %-52s %18s %18s %18s   %s\n", "workload (median)", mounts[0].name, mounts[1].name, mounts[2].name, "ratio sidecar, shared to standalone")
	for i, w := range wls {
		row := datapathRow{name: w.name, unit: w.unit}
		for _, m := range mounts {
			row.medians = append(row.medians, median(figures[i][m.name]))
			row.spread = append(row.spread, spread(figures[i][m.name]))
		}
		res.rows = append(res.rows, row)
		fmt.Printf("  %-52s %18s %18s %18s   %.2f  %.2f\n", w.name, row.cell(0), row.cell(1), row.cell(2),
			row.medians[1]/row.medians[0], row.medians[2]/row.medians[0])
	}
	b.res.datapath = &res
	return nil
}

// datapathMounts mounts three buckets: standalone gcsfuse on a directory (root, the default
// flags our sidecar gives it against an emulator), a pod's volume through the sidecar (native)
// and a pod's volume through the shared mounter, each with a file cache of cacheMiB when it
// is not 0 (a cache directory each, the volume's file-cache-max-size-mb). stop unmounts them
// all.
func (b *bench) datapathMounts(cacheMiB int) ([]dpMount, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) ([]dpMount, func(), error) { stop(); return nil, nil, err }

	base := filepath.Join(b.dir, fmt.Sprintf("datapath-%d", cacheMiB))
	alone := dpMount{name: "standalone", dir: filepath.Join(base, "standalone"), bucket: b.bucket()}
	tmp, cacheDir := filepath.Join(base, "standalone-tmp"), filepath.Join(base, "cache")
	for _, d := range []string{alone.dir, tmp, cacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(err)
		}
	}
	// The sidecar and the mounter run as 65534 and keep their caches below it.
	if err := os.Chown(cacheDir, contract.SidecarUID, contract.SidecarGID); err != nil {
		return fail(err)
	}
	var extra []string
	options := ""
	if cacheMiB > 0 {
		options = "file-cache-max-size-mb=" + strconv.Itoa(cacheMiB)
		extra = []string{"--cache-dir=" + filepath.Join(base, "standalone-cache"), "--file-cache-max-size-mb=" + strconv.Itoa(cacheMiB)}
	}
	stopAlone, err := b.startStandalone(alone.bucket, alone.dir, tmp, extra...)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, stopAlone)
	if _, err := waitMounted(alone.dir, datapathMountWait); err != nil {
		return fail(err)
	}
	if cacheMiB > 0 {
		alone.cache = filepath.Join(base, "standalone-cache")
	}

	e, err := testenv.New(testenv.Options{Emulator: b.emu, SidecarBin: b.sidecarBin, Shared: true})
	if err != nil {
		return fail(err)
	}
	stops = append(stops, e.Close)
	sidecarPod, err := e.NewPod()
	if err != nil {
		return fail(err)
	}
	sidecar := dpMount{name: "sidecar", dir: sidecarPod.Target("data"), bucket: b.bucket()}
	if cacheMiB > 0 {
		sidecar.cache = filepath.Join(cacheDir, "sidecar")
	}
	if err := sidecarPod.Publish(ctx(), "data", sidecar.bucket, options, false); err != nil {
		return fail(err)
	}
	if _, err := sidecarPod.StartSidecarWith(testenv.SidecarOptions{Mode: contract.ModeNative, GraceSeconds: 30,
		Args: []string{"--cache-dir=" + filepath.Join(cacheDir, "sidecar")}}); err != nil {
		return fail(err)
	}
	if _, err := testenv.WaitReady(sidecar.dir, datapathMountWait); err != nil {
		return fail(err)
	}

	if _, err := e.StartMounter(testenv.SidecarOptions{GraceSeconds: 30, Args: []string{"--cache-dir=" + filepath.Join(cacheDir, "mounter")}}); err != nil {
		return fail(err)
	}
	sharedPod, err := e.NewPod()
	if err != nil {
		return fail(err)
	}
	shared := dpMount{name: "shared", dir: sharedPod.Target("data"), bucket: b.bucket()}
	if cacheMiB > 0 {
		shared.cache = filepath.Join(cacheDir, "mounter")
	}
	req := sharedPod.PublishRequest("data", shared.bucket, options, false)
	req.VolumeContext[contract.AttrMountMode] = contract.MountModeShared
	if err := sharedPod.PublishReq(ctx(), req); err != nil {
		return fail(err)
	}
	if _, err := testenv.WaitReady(shared.dir, datapathMountWait); err != nil {
		return fail(err)
	}
	return []dpMount{alone, sidecar, shared}, stop, nil
}

// seedListing creates n empty objects under listing/ through the emulator's API, and the
// directory's own object (gcsfuse sees no implicit directories without --implicit-dirs).
func (b *bench) seedListing(bucket string, n int) error {
	b.emu.CreateObject(fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: "listing/"}})
	sem := make(chan struct{}, listingSetupParallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			b.emu.CreateObject(fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: fmt.Sprintf("listing/obj-%06d", i)}})
		})
	}
	wg.Wait()
	return nil
}

// emptyBucket deletes every object of bucket but those under keep.
func (b *bench) emptyBucket(bucket, keep string) error {
	// One page holds every object (no MaxResults); the loop is bounded all the same.
	token := ""
	for range 1000 {
		page, err := b.emu.ListObjectsWithOptionsPaginated(bucket, fakestorage.ListOptions{PageToken: token})
		if err != nil {
			return fmt.Errorf("list %s: %w", bucket, err)
		}
		for _, o := range page.Objects {
			if !strings.HasPrefix(o.Name, keep) {
				if err := b.emu.Client().Bucket(bucket).Object(o.Name).Delete(context.Background()); err != nil {
					return fmt.Errorf("delete %s/%s: %w", bucket, o.Name, err)
				}
			}
		}
		if token = page.NextPageToken; token == "" {
			return nil
		}
	}
	return fmt.Errorf("list %s: more than 1000 pages", bucket)
}

// randomReads reads n blocks of size at random offsets of a file of fileSize.
func randomReads(path string, fileSize int64, size, n int) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, size)
	blocks := fileSize / int64(size)
	t0 := time.Now()
	for range n {
		if _, err := f.ReadAt(buf, rand.Int64N(blocks)*int64(size)); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// smallFiles runs one phase over n files of smallFileSize in dir: create (write and close
// each), stat, read, or delete.
func smallFiles(dir string, n int, phase string) (float64, error) {
	if phase == "create" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, err
		}
	}
	data := make([]byte, smallFileSize)
	t0 := time.Now()
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("f-%06d", i))
		var err error
		switch phase {
		case "create":
			err = os.WriteFile(p, data, 0o644)
		case "stat":
			_, err = os.Stat(p)
		case "read":
			var b []byte
			if b, err = os.ReadFile(p); err == nil && len(b) != smallFileSize {
				err = fmt.Errorf("%s: %d bytes, want %d", p, len(b), smallFileSize)
			}
		case "delete":
			err = os.Remove(p)
		default:
			err = fmt.Errorf("unknown phase %q", phase)
		}
		if err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// listing lists dir (n entries expected) once, from gcsfuse's cold metadata cache as far as
// a new open can make it: the figure is listings per second.
func listing(dir string, n int) (float64, error) {
	t0 := time.Now()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	if len(entries) != n {
		return 0, fmt.Errorf("%s: %d entries, want %d", dir, len(entries), n)
	}
	return 1 / time.Since(t0).Seconds(), nil
}

// parallelFiles writes (then fsyncs) or reads n files of size in dir, all at once; the
// figure is the total MiB/s.
func parallelFiles(dir string, n int, size int64, write bool) (float64, error) {
	if write {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, err
		}
	}
	errs := make(chan error, n)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p := filepath.Join(dir, fmt.Sprintf("part-%03d", i))
			if write {
				errs <- writeSynced(p, size)
				return
			}
			_, err := timeIO(p, size, false)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(int64(n)*size) / (1 << 20) / time.Since(t0).Seconds(), nil
}

// writeSynced writes size bytes to path in 1 MiB chunks, fsyncs and closes it.
func writeSynced(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for done := int64(0); done < size; done += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dirBytes is the size of the regular files under dir (0 when there is none).
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// spread is the figures' (max-min)/median, the rounds' disagreement.
func spread(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	m := median(s)
	if m == 0 {
		return 0
	}
	return (s[len(s)-1] - s[0]) / m
}

// datapathResult is what -markdown writes of the data-path benchmark.
type datapathResult struct {
	rounds int
	modes  []string // standalone, sidecar, shared
	rows   []datapathRow
}

type datapathRow struct {
	name, unit      string
	medians, spread []float64 // per mode, in modes' order
}

// cell is mode i's median and spread, as the text and the Markdown print it.
func (r datapathRow) cell(i int) string {
	return fmt.Sprintf("%s %s ±%.0f%%", figure(r.medians[i]), r.unit, 100*r.spread[i]/2)
}

// figure prints a value with three significant digits at most.
func figure(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
