package main

import (
	"github.com/moby/sys/mountinfo"

	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/metricscatalog"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// Leak kinds: the keys of a snapshot.
const (
	leakMounts     = "driver mounts (fuse.gcsfuse under <kubelet>/pods)"
	leakGcsfuse    = "gcsfuse processes (children of a sidecar)"
	leakSidecars   = "sidecar processes"
	leakSockets    = "hand-off and metrics sockets (gcsfuse-tmp emptyDirs)"
	leakExitFiles  = "exit files (gcsfuse-tmp emptyDirs)"
	leakOffers     = "pending offer records (node plugin state dir)"
	leakPodDirs    = "pod directories (<kubelet>/pods)"
	leakGoroutines = "node plugin goroutines (go_goroutines)"
	leakFDs        = "node plugin open fds (/proc/<pid>/fd)"
	leakInotify    = "inotify instances, uid " // + the uid: inotifyKind
)

var leakPublished = "node plugin published volumes (" + metricscatalog.VolumesPublished.Name + ")"

// inotifyKind is the leak kind of uid's inotify instances (uid 65534: the sidecars' and
// their gcsfuse's, contract.SidecarUID).
func inotifyKind(uid int) string { return leakInotify + strconv.Itoa(uid) }

// tolerance is how much each kind may grow without counting as a leak (goroutineTolerance
// says why the goroutines have one; every other kind has none).
var tolerance = map[string]int{leakGoroutines: goroutineTolerance}

// snapshot is what the node holds at one moment: a count per leak kind and, for the report,
// what was counted (mount points, paths, processes, fd kinds).
type snapshot struct {
	counts map[string]int
	items  map[string][]string
}

func (s *snapshot) add(kind, item string) {
	s.counts[kind]++
	s.items[kind] = append(s.items[kind], item)
}

// snapshot takes the node's counts. The mounts, processes and files are the whole node's
// (the cluster's only workload is this program's), taken before and after, so a leak is any
// growth.
func (s *scale) snapshot(ctx context.Context, np nodePlugin) (snapshot, error) {
	sn := snapshot{counts: map[string]int{}, items: map[string][]string{}}
	for _, k := range []string{leakMounts, leakGcsfuse, leakSidecars, leakSockets, leakExitFiles, leakOffers, leakPodDirs, leakGoroutines, leakFDs, leakPublished} {
		sn.counts[k] = 0
	}
	// The scrape first: the fds and goroutines it costs the node plugin (the API server's
	// proxy connection, kept alive or not) are then in every snapshot's counts alike.
	mfs, err := s.scrapeNodePlugin(ctx)
	if err != nil {
		return sn, err
	}
	sn.counts[leakGoroutines] = int(sumMetric(mfs, "go_goroutines"))
	sn.counts[leakPublished] = int(sumMetric(mfs, metricscatalog.VolumesPublished.Name))
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return sn, err
	}
	mounts, err := parseMountinfo(f)
	f.Close()
	if err != nil {
		return sn, err
	}
	for _, m := range driverMounts(mounts, s.opts.kubeletRoot) {
		sn.add(leakMounts, m.point+" (bucket "+m.source+")")
	}
	dirs, _ := filepath.Glob(podfiles.PodDir(s.opts.kubeletRoot, "*"))
	for _, d := range dirs {
		sn.add(leakPodDirs, d)
	}
	// Glob patterns: "*" for every pod, and for every volume.
	tmp := podfiles.At(podfiles.TmpDirPath(s.opts.kubeletRoot, "*"))
	for _, pattern := range []string{tmp.HandoffSocket("*"), tmp.MetricsSocket()} {
		socks, _ := filepath.Glob(pattern)
		for _, p := range socks {
			sn.add(leakSockets, p)
		}
	}
	exits, _ := filepath.Glob(tmp.ExitFile())
	for _, p := range exits {
		sn.add(leakExitFiles, p)
	}
	offers, _ := filepath.Glob(filepath.Join(s.opts.kubeletRoot, "plugins", contract.DriverName, "offers", "*.json"))
	for _, p := range offers {
		sn.add(leakOffers, p)
	}
	procs := readProcs()
	for uid, n := range inotifyByUID(procs) {
		sn.counts[inotifyKind(uid)] = n
	}
	for _, p := range procs {
		switch {
		case p.argv0 == gcsfuseCommand && argv0(p.ppid) == sidecarCommand:
			sn.add(leakGcsfuse, fmt.Sprintf("pid %d", p.pid))
		case p.argv0 == sidecarCommand:
			sn.add(leakSidecars, fmt.Sprintf("pid %d", p.pid))
		}
		for range p.inotify {
			sn.items[inotifyKind(p.uid)] = append(sn.items[inotifyKind(p.uid)], p.argv0)
		}
		if p.pid == np.pid {
			for _, k := range p.fdKinds {
				sn.add(leakFDs, k)
			}
		}
	}
	return sn, nil
}

// mount is one line of mountinfo: mount point, file system type and source.
type mount struct{ point, fstype, source string }

// parseMountinfo reads /proc/<pid>/mountinfo (moby/sys/mountinfo's parser: octal escapes
// undone, a malformed line an error).
func parseMountinfo(r io.Reader) ([]mount, error) {
	infos, err := mountinfo.GetMountsFromReader(r, nil)
	if err != nil {
		return nil, err
	}
	out := make([]mount, 0, len(infos))
	for _, m := range infos {
		out = append(out, mount{point: m.Mountpoint, fstype: m.FSType, source: m.Source})
	}
	return out, nil
}

// driverMounts are this driver's mounts on the kubelet's pod volumes.
func driverMounts(ms []mount, kubeletRoot string) []mount {
	prefix := filepath.Join(kubeletRoot, "pods") + "/"
	var out []mount
	for _, m := range ms {
		if m.fstype == fusemount.FSType && strings.HasPrefix(m.point, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// proc is what the snapshot reads of one process.
type proc struct {
	pid, ppid, uid int
	argv0          string
	// inotify is its inotify instances (fds open on anon_inode:inotify).
	inotify int
	// fdKinds is the kind of each open fd (fdKind), read for the node plugin only.
	fdKinds []string
}

// readProcs reads every process of this machine (one that ends meanwhile is skipped).
func readProcs() []proc {
	var out []proc
	for _, pid := range pids() {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		uid, _ := effectiveUID(status)
		p := proc{pid: pid, ppid: parentPID(pid), uid: uid, argv0: argv0(pid)}
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			k := fdKind(target)
			if k == inotifyTarget {
				p.inotify++
			}
			if p.argv0 == nodePluginCommand {
				p.fdKinds = append(p.fdKinds, k)
			}
		}
		out = append(out, p)
	}
	return out
}

// inotifyTarget is the link target of an inotify instance's fd.
const inotifyTarget = "anon_inode:inotify"

// fdKind reduces an fd's link target to its kind: sockets and pipes without their inode
// numbers, anonymous inodes and files as they are.
func fdKind(target string) string {
	for _, k := range []string{"socket:", "pipe:"} {
		if strings.HasPrefix(target, k) {
			return strings.TrimSuffix(k, ":")
		}
	}
	return target
}

// inotifyByUID sums the processes' inotify instances per effective uid.
func inotifyByUID(ps []proc) map[int]int {
	out := map[int]int{}
	for _, p := range ps {
		if p.inotify > 0 {
			out[p.uid] += p.inotify
		}
	}
	return out
}

// leak is one kind's count before and after.
type leak struct {
	kind                   string
	before, after, allowed int
	// extra are the items after that were not there before (as a multiset).
	extra []string
}

func (l leak) leaked() bool { return l.after-l.before > l.allowed }

func (l leak) String() string {
	s := fmt.Sprintf("%s: %d before, %d after (%+d", l.kind, l.before, l.after, l.after-l.before)
	if l.allowed > 0 {
		s += fmt.Sprintf(", %d allowed", l.allowed)
	}
	s += ")"
	if len(l.extra) > 0 {
		shown := l.extra[:min(len(l.extra), maxLeakDetail)]
		s += ": " + strings.Join(shown, ", ")
		if len(l.extra) > len(shown) {
			s += fmt.Sprintf(" and %d more", len(l.extra)-len(shown))
		}
	}
	return s
}

// diffLeaks compares every kind of two snapshots (a kind in only one counts 0 in the other).
func diffLeaks(before, after snapshot, allowed map[string]int) []leak {
	kinds := map[string]bool{}
	for k := range before.counts {
		kinds[k] = true
	}
	for k := range after.counts {
		kinds[k] = true
	}
	var out []leak
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		out = append(out, leak{kind: k, before: before.counts[k], after: after.counts[k], allowed: allowed[k], extra: extra(before.items[k], after.items[k])})
	}
	return out
}

// extra is the multiset difference after - before, sorted.
func extra(before, after []string) []string {
	n := map[string]int{}
	for _, b := range before {
		n[b]++
	}
	var out []string
	for _, a := range after {
		if n[a] > 0 {
			n[a]--
			continue
		}
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// settle retakes the snapshot every settlePoll until nothing has leaked or -settle has
// passed (the kubelet unmounts and removes a deleted pod's directories in its own time), and
// returns the last comparison and how long it waited.
func (s *scale) settle(ctx context.Context, np nodePlugin, before snapshot) ([]leak, time.Duration, error) {
	start := time.Now()
	for {
		after, err := s.snapshot(ctx, np)
		if err != nil {
			return nil, 0, fmt.Errorf("leak snapshot after the runs: %w", err)
		}
		leaks := diffLeaks(before, after, tolerance)
		if !slices.ContainsFunc(leaks, leak.leaked) || time.Since(start) >= s.opts.settle {
			return leaks, time.Since(start), nil
		}
		sleep(ctx, settlePoll)
	}
}

func printLeaks(w io.Writer, leaks []leak, settled time.Duration) {
	fmt.Fprintf(w, "\n| leak: the node before the first pod and after the last one was gone (settled %s) | before | after | growth | allowed |\n", settled.Round(time.Second))
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, l := range leaks {
		fmt.Fprintf(w, "| %s | %d | %d | %+d | %d |\n", l.kind, l.before, l.after, l.after-l.before, l.allowed)
	}
}
