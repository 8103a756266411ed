package nodeplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

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
	l.writePodFile(pod, podfiles.TerminatingFile, func(dir *os.File) error { return podfiles.WriteTerminating(dir, t) })
}

// InitContainersSucceeded writes podfiles.InitDoneFile for a native-sidecar pod whose
// regular init containers all exited 0 (podwatch.InitHandler): a SIGTERM that the sidecar
// gets from then on comes after every container that can use the mounts has exited.
func (l *ExitCoordinator) InitContainersSucceeded(pod *corev1.Pod) {
	d := podfiles.InitDone{WrittenAt: time.Now()}
	l.writePodFile(pod, podfiles.InitDoneFile, func(dir *os.File) error { return podfiles.WriteInitDoneIn(dir, d) })
}

// writePodFile writes one file into the pod's gcsfuse-tmp emptyDir. A pod whose emptyDir is
// gone (already cleaned up) or was never created is skipped silently: its sidecar is not
// running to read the file. A write that fails otherwise (a full or read-only kubelet
// directory) is retried in the background, with the exit request's backoff, for the exit
// request's retry budget: these files matter during a deletion's grace or at the end of
// the init containers, and a sidecar that never gets them serves on a wrong deadline or
// drains too early.
func (l *ExitCoordinator) writePodFile(pod *corev1.Pod, name string, write func(*os.File) error) {
	log := l.Log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "file", name)
	key := podFileKey{pod.UID, name}
	gen := l.podFileGeneration(key, true)
	err := l.tryPodFile(pod, write)
	switch {
	case err == nil:
		l.podFileDone(key, gen)
		log.Info("wrote the file for the sidecar")
		return
	case errors.Is(err, os.ErrNotExist):
		l.podFileDone(key, gen)
		log.Debug("no emptyDir; file not written")
		return
	}
	log.Warn("cannot write the file for the sidecar; retrying", "err", fmt.Errorf("%s: %w", name, err))
	p := l.exitRetry.orDefaults()
	l.goOwned(func(ctx context.Context) {
		defer l.podFileDone(key, gen)
		pace := backoff.Doubling(p.first, p.max)
		deadline := time.Now().Add(p.total)
		for attempts := 2; ; attempts++ {
			remaining := time.Until(deadline)
			if remaining <= 0 {
				log.Error("cannot write the file for the sidecar; giving up", "attempts", attempts-1, "for", p.total.String(), "err", err)
				return
			}
			if !sleep(ctx, min(pace.Step(), remaining)) {
				return
			}
			if l.podFileGeneration(key, false) != gen {
				log.Info("a newer write of the file was asked; this one stops", "attempts", attempts-1)
				return
			}
			err = l.tryPodFile(pod, write)
			switch {
			case err == nil:
				log.Info("wrote the file for the sidecar", "attempts", attempts)
				return
			case errors.Is(err, os.ErrNotExist):
				log.Info("the pod's emptyDir is gone; file not written", "attempts", attempts)
				return
			}
		}
	})
}

// podFileGeneration returns the number of the latest write of key, after counting a new
// one when next is set.
func (l *ExitCoordinator) podFileGeneration(key podFileKey, next bool) uint64 {
	l.podFilesMu.Lock()
	defer l.podFilesMu.Unlock()
	if l.podFiles == nil {
		l.podFiles = map[podFileKey]uint64{}
	}
	if next {
		l.podFileSeq++
		l.podFiles[key] = l.podFileSeq
	}
	return l.podFiles[key]
}

// podFileDone forgets key once its latest write (gen) has ended, so that the map holds
// only files being retried.
func (l *ExitCoordinator) podFileDone(key podFileKey, gen uint64) {
	l.podFilesMu.Lock()
	defer l.podFilesMu.Unlock()
	if l.podFiles[key] == gen {
		delete(l.podFiles, key)
	}
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
