package nodeplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitfile"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// PodDeleting writes contract.TerminatingFile for a pod being deleted
// (podwatch.DeletionHandler): a draining sidecar serves until the grace the kubelet applies,
// which kubectl delete --grace-period can make shorter or longer than the spec's.
func (l *ExitCoordinator) PodDeleting(pod *corev1.Pod) {
	t := exitfile.Terminating{GraceSeconds: graceSeconds(pod)}
	if pod.DeletionTimestamp != nil {
		t.DeletionTimestamp = pod.DeletionTimestamp.Time
	}
	l.writePodFile(pod, contract.TerminatingFile, func(dir *os.File) error { return exitfile.WriteTerminating(dir, t) })
}

// InitContainersSucceeded writes contract.InitDoneFile for a native-sidecar pod whose
// regular init containers all exited 0 (podwatch.InitHandler): a SIGTERM that the sidecar
// gets from then on comes after every container that can use the mounts has exited.
func (l *ExitCoordinator) InitContainersSucceeded(pod *corev1.Pod) {
	b, err := json.Marshal(struct {
		WrittenAt time.Time `json:"writtenAt"`
	}{time.Now()})
	if err != nil {
		l.Log.Error("cannot encode the init-done file", "err", err)
		return
	}
	l.writePodFile(pod, contract.InitDoneFile, func(dir *os.File) error {
		return podpath.WriteFileAtomic(dir, contract.InitDoneFile, b, 0o644)
	})
}

// writePodFile writes one file into the pod's gcsfuse-tmp emptyDir. A pod whose emptyDir is
// gone (already cleaned up) or was never created is skipped silently: its sidecar is not
// running to read the file.
func (l *ExitCoordinator) writePodFile(pod *corev1.Pod, name string, write func(*os.File) error) {
	log := l.Log.With("pod", pod.Namespace+"/"+pod.Name, "podUID", pod.UID, "file", name)
	dir, err := podpath.OpenDir(l.KubeletRoot, "pods", string(pod.UID), "volumes", "kubernetes.io~empty-dir", contract.TmpVolumeName)
	if errors.Is(err, os.ErrNotExist) {
		log.Debug("no emptyDir; file not written")
		return
	}
	if err != nil {
		log.Warn("cannot open the pod's emptyDir", "err", err)
		return
	}
	defer dir.Close()
	if err := write(dir); err != nil {
		log.Warn("cannot write the file for the sidecar", "err", fmt.Errorf("%s: %w", name, err))
		return
	}
	log.Info("wrote the file for the sidecar")
}
