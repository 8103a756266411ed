package exitcoord

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// The records' lifetime. A record is dropped once its pod's kubelet directory is gone: the
// kubelet removes it after the pod's containers and volumes, so nothing of the pod is left
// to tell anything. Until then a pod costs one record, whatever happened to it.
const (
	// recordSweepEvery is the least time between two sweeps for records whose pod is gone;
	// a sweep runs when a record is made and one is due, so an idle node sweeps nothing.
	recordSweepEvery = time.Minute
	// recordMinAge keeps a young record even without a pod directory: the API reports a pod
	// scheduled here before the kubelet makes its directory.
	recordMinAge = time.Minute
)

// exitState is where the exit request of a pod stands.
type exitState int

const (
	exitIdle    exitState = iota // not asked yet
	exitActive                   // being attempted or retried
	exitSettled                  // the exit file is there (written by us, or found), or the sidecar is gone
	exitGaveUp                   // the effort ended without telling; the next ask tries again
)

// podRecord is everything the node plugin remembers about one pod, with one lifetime (from
// the first report of the pod by any source, the pod watch, the runtime watch or a sidecar,
// until its directory is gone). One record, rather than a memory per part with an expiry
// of its own, so that the parts cannot disagree: a request that an earlier report gave up
// is tried again by any later report, and a repeat is recognised however it comes.
// Guarded by podRecords.mu.
type podRecord struct {
	created time.Time

	// doneReported: the workload's end was logged and counted (from the API or the runtime).
	doneReported bool
	exit         exitState
	// exitFailedReported: SidecarExitFailed was recorded; never twice for a pod.
	exitFailedReported bool

	// deciding: a goroutine decides from the runtime's view (ContainersChanged);
	// decideAgain: the pod's containers changed meanwhile, so it decides once more.
	deciding, decideAgain bool

	// follower follows the pod's containers in the runtime; it stays after its end, so that
	// a pod is followed once.
	follower *follower

	// files are the pod files asked for (writePodFile), by name.
	files map[string]*podFile

	drainingReported bool   // a sidecar reported terminating: SidecarDraining recorded
	latencyObserved  bool   // the sidecar's exit latency was counted
	failedRun        string // the last sidecar run reported as failed
}

// podFile is the latest write of one pod file that was asked for.
type podFile struct {
	gen  uint64 // its number (podRecords.seq), never reused: an older retry stops for a newer one
	want string // what was asked: the same ask again is a repeat
	busy bool   // being written or retried
}

// busy reports whether work for the pod is under way; a busy record is never dropped.
func (r *podRecord) busy() bool {
	if r.exit == exitActive || r.deciding || (r.follower != nil && r.follower.finished.IsZero()) {
		return true
	}
	for _, f := range r.files {
		if f.busy {
			return true
		}
	}
	return false
}

// podRecords holds the records of the node's pods by UID.
type podRecords struct {
	mu        sync.Mutex
	pods      map[types.UID]*podRecord
	seq       uint64 // the last podFile.gen given
	lastSweep time.Time
	sweeping  bool
}

// update runs f on the record of uid, made now if there is none, under the records' lock;
// sweep reports whether the caller should start a sweep (sweepGone).
func (p *podRecords) update(uid types.UID, f func(r *podRecord)) (sweep bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pods == nil {
		p.pods = map[types.UID]*podRecord{}
	}
	r := p.pods[uid]
	now := time.Now()
	if r == nil {
		r = &podRecord{created: now}
		p.pods[uid] = r
		if !p.sweeping && now.Sub(p.lastSweep) >= recordSweepEvery {
			p.sweeping, sweep = true, true
		}
	}
	f(r)
	return sweep
}

// nextGen returns a new pod file write number; the caller holds mu.
func (p *podRecords) nextGen() uint64 {
	p.seq++
	return p.seq
}

// len returns the number of records.
func (p *podRecords) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pods)
}

// sweepGone drops the records of pods whose directory under kubeletRoot is gone and for
// which no work runs. The directories are looked at without the lock, and a record that
// became busy meanwhile is kept.
func (p *podRecords) sweepGone(ctx context.Context, kubeletRoot string) (dropped int) {
	defer func() {
		p.mu.Lock()
		p.sweeping, p.lastSweep = false, time.Now()
		p.mu.Unlock()
	}()
	if kubeletRoot == "" {
		return 0
	}
	now := time.Now()
	p.mu.Lock()
	var idle []types.UID
	for uid, r := range p.pods {
		if !r.busy() && now.Sub(r.created) >= recordMinAge {
			idle = append(idle, uid)
		}
	}
	p.mu.Unlock()
	var gone []types.UID
	for _, uid := range idle {
		if ctx.Err() != nil {
			return 0
		}
		if _, err := os.Lstat(podfiles.PodDir(kubeletRoot, string(uid))); errors.Is(err, os.ErrNotExist) {
			gone = append(gone, uid)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, uid := range gone {
		if r := p.pods[uid]; r != nil && !r.busy() {
			delete(p.pods, uid)
			dropped++
		}
	}
	return dropped
}

// record runs f on the record of uid (see podRecords.update), and starts a sweep of the
// records of gone pods when one is due, in a goroutine l owns.
func (l *ExitCoordinator) record(uid types.UID, f func(r *podRecord)) {
	if !l.pods.update(uid, f) {
		return
	}
	if !l.goOwned(func(ctx context.Context) {
		if n := l.pods.sweepGone(ctx, l.KubeletRoot); n > 0 {
			l.Log.Debug("forgot the pods whose directory is gone", "pods", n)
		}
	}) {
		l.pods.mu.Lock()
		l.pods.sweeping = false
		l.pods.mu.Unlock()
	}
}
