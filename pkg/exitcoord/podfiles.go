package exitcoord

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/backoff"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/lifecycle"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
)

// PodDeleting writes podfiles.TerminatingFile for a pod being deleted
// (podwatch.DeletionHandler): a draining sidecar serves until the grace the kubelet applies,
// which kubectl delete --grace-period can make shorter or longer than the spec's.
func (l *ExitCoordinator) PodDeleting(pod *corev1.Pod) {
	t := podfiles.Terminating{GraceSeconds: lifecycle.AppliedGraceSeconds(pod)}
	if pod.DeletionTimestamp != nil {
		t.DeletionTimestamp = pod.DeletionTimestamp.Time
	}
	want := fmt.Sprintf("grace %d, deleted at %s", t.GraceSeconds, t.DeletionTimestamp.Format(time.RFC3339Nano))
	l.writePodFile(pod, podfiles.TerminatingFile, want, func(dir *os.File) error { return podfiles.WriteTerminating(dir, t) })
}

// InitContainersSucceeded writes podfiles.InitDoneFile for a native-sidecar pod whose
// regular init containers all exited 0 (podwatch.InitHandler): a SIGTERM that the sidecar
// gets from then on comes after every container that can use the mounts has exited.
func (l *ExitCoordinator) InitContainersSucceeded(pod *corev1.Pod) {
	d := podfiles.InitDone{WrittenAt: time.Now()}
	l.writePodFile(pod, podfiles.InitDoneFile, "init-done", func(dir *os.File) error { return podfiles.WriteInitDoneIn(dir, d) })
}

// writePodFile writes one file into the pod's gcsfuse-tmp emptyDir, unless the same
// content (want) was already written or is being written: the pod watch reports a pod at
// each of its updates, and a second deletion with a shorter grace changes the terminating
// file's content. A pod whose emptyDir is gone (already cleaned up) or was never created is
// skipped: its sidecar is not running to read the file; a later report tries again. A
// write that fails otherwise (a full or read-only kubelet directory) is retried in the
// background, with the exit request's backoff, for the exit request's retry budget: these
// files matter during a deletion's grace or at the end of the init containers, and a
// sidecar that never gets them serves on a wrong deadline or drains too early. A write
// given up is tried again at the pod's next report; a newer content stops an older retry.
func (l *ExitCoordinator) writePodFile(pod *corev1.Pod, name, want string, write func(*os.File) error) {
	var gen uint64
	l.record(pod.UID, func(r *podRecord) {
		if f := r.files[name]; f != nil && f.want == want {
			return // written, or being written
		}
		if r.files == nil {
			r.files = map[string]*podFile{}
		}
		gen = l.pods.nextGen()
		r.files[name] = &podFile{gen: gen, want: want, busy: true}
	})
	if gen == 0 {
		return
	}
	log := l.Log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "file", name)
	err := l.tryPodFile(pod, write)
	switch {
	case err == nil:
		l.podFileDone(pod.UID, name, gen, true)
		log.Info("wrote the file for the sidecar")
		return
	case errors.Is(err, os.ErrNotExist):
		l.podFileDone(pod.UID, name, gen, false)
		log.Debug("no emptyDir; file not written")
		return
	}
	log.Warn("cannot write the file for the sidecar; retrying", "err", fmt.Errorf("%s: %w", name, err))
	p := l.exitRetry.orDefaults()
	if !l.goOwned(func(ctx context.Context) {
		written := false
		defer func() { l.podFileDone(pod.UID, name, gen, written) }()
		pace := backoff.Doubling(p.first, p.max)
		deadline := time.Now().Add(p.total)
		for attempts := 2; ; attempts++ {
			remaining := time.Until(deadline)
			if remaining <= 0 {
				log.Error("cannot write the file for the sidecar; giving up until the pod's next report", "attempts", attempts-1, "for", p.total.String(), "err", err)
				return
			}
			if !sleep(ctx, min(pace.Step(), remaining)) {
				return
			}
			if !l.podFileCurrent(pod.UID, name, gen) {
				log.Info("a newer write of the file was asked; this one stops", "attempts", attempts-1)
				return
			}
			err = l.tryPodFile(pod, write)
			switch {
			case err == nil:
				written = true
				log.Info("wrote the file for the sidecar", "attempts", attempts)
				return
			case errors.Is(err, os.ErrNotExist):
				log.Info("the pod's emptyDir is gone; file not written", "attempts", attempts)
				return
			}
		}
	}) {
		l.podFileDone(pod.UID, name, gen, false)
	}
}

// podFileCurrent reports whether gen is still the latest write asked of the pod's file.
func (l *ExitCoordinator) podFileCurrent(uid types.UID, name string, gen uint64) (current bool) {
	l.record(uid, func(r *podRecord) {
		f := r.files[name]
		current = f != nil && f.gen == gen
	})
	return current
}

// podFileDone ends the write gen of the pod's file, if it is still the latest: a written
// file is remembered (the same content is not written again), one not written is
// forgotten, so that the pod's next report tries again.
func (l *ExitCoordinator) podFileDone(uid types.UID, name string, gen uint64, written bool) {
	l.record(uid, func(r *podRecord) {
		f := r.files[name]
		switch {
		case f == nil || f.gen != gen:
		case written:
			f.busy = false
		default:
			delete(r.files, name)
		}
	})
}

// tryPodFile makes one attempt at writing a file into the pod's gcsfuse-tmp emptyDir.
func (l *ExitCoordinator) tryPodFile(pod *corev1.Pod, write func(*os.File) error) error {
	dir, err := podfiles.OpenTmpDir(l.KubeletRoot, string(pod.UID))
	if err != nil {
		return err
	}
	defer dir.Close()
	return write(dir)
}
