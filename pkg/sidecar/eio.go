package sidecar

import (
	"os"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fuseerr"
)

// degrade answers a volume whose gcsfuse never served (or whose hand-off was refused) with
// I/O errors, instead of closing the descriptor. A closed descriptor leaves a mount that
// fails even a stat of the mount point, so the kubelet cannot create the app container and
// the pod hangs in CreateContainerError; with I/O errors the app starts, fails on its first
// access, and the pod ends. Returns false (and closes spare) when that is not possible.
func (s *Sidecar) degrade(volume string, spare *os.File) bool {
	f, err := fuseerr.Pollable(spare)
	spare.Close()
	if err != nil {
		s.log.Error("cannot answer the failed volume", "volume", volume, "err", err)
		return false
	}
	initDone := make(chan struct{})
	served := make(chan error, 1)
	go func() { // owned by s: ends on unmount or when shutdown closes f
		served <- fuseerr.Serve(f, degradeInitWait, func() { close(initDone) })
	}()
	select {
	case <-initDone:
		s.degraded = append(s.degraded, f)
		s.log.Warn("volume failed; answering it with I/O errors so the app fails instead of hanging", "volume", volume)
		return true
	case err := <-served:
		f.Close()
		s.log.Warn("cannot answer the failed volume; its mount fails with ENOTCONN", "volume", volume, "err", err)
		return false
	}
}

// takeOver answers a shared volume whose gcsfuse died while serving with I/O errors, the
// requests it had read and not answered included, until its last mount is gone (every pod
// that held it has ended) or the mounter stops: the pods see EIO, as from a failed disk,
// never an empty directory. Where the kernel cannot hand back those requests (before
// Linux 6.9) the descriptor is closed instead: the kernel aborts the connection and the
// pods see ENOTCONN, since an answered connection would leave the callers of those
// requests waiting forever.
func (s *Sidecar) takeOver(volume string, spare *os.File) {
	f, err := fuseerr.Pollable(spare)
	spare.Close()
	if err == nil {
		err = fuseerr.TakeOver(f)
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		s.log.Warn("cannot answer the dead shared volume with I/O errors; its pods see ENOTCONN", "volume", volume, "err", err)
		return
	}
	s.degraded = append(s.degraded, f)
	go func() { // owned by s: ends once the mount is gone, or when shutdown closes f
		if err := fuseerr.ServeEIO(f); err != nil {
			s.log.Warn("answering the dead shared volume ended", "volume", volume, "err", err)
		}
	}()
	s.log.Warn("shared volume's gcsfuse died; answering its pods with I/O errors until they end", "volume", volume)
}
