// Command nodeinit is PID 1 of a local cluster node (hack/cluster-up.sh): the node's
// kubelet, containerd, kube-proxy and SSH endpoint run in PID, mount, UTS and IPC
// namespaces of their own under it, the way kind's node containers run under systemd, so
// that a hostPID pod's `nsenter --mount=/proc/1/ns/mnt` reaches the node's mounts (this
// machine's own init refuses that open, even to root) and a test can stop the node's
// kubelet or the whole node as on a real one.
//
// It does what an init must and nothing else: it sets the node's hostname, reaps every
// process that ends in the node (containerd's shims double-fork onto it; a unit started
// with `nsenter -t <init> -a` is re-parented to it when its nsenter ends), ignores the
// signals a PID 1 without a handler ignores, and on SIGTERM or SIGINT it stops the node:
// SIGTERM to every process of the node, then, after -grace, SIGKILL to what is left, and it
// exits once none is left (the kernel would kill the rest with PID 1 anyway; waiting gives
// each its grace). SIGKILL to it is the node's power cut.
//
//	nsenter --net=/run/netns/NS -- unshare --pid --mount --uts --ipc --fork --kill-child \
//	  --mount-proc --propagation unchanged -- nodeinit -hostname vm
//
// A second node on the same machine (hack/node-up.sh) needs state directories of its own
// where the first node has its: -private makes every mount of the node a slave of this
// machine's (what the node mounts stays in it, as on a machine of its own), then -bind
// SRC:DST puts a directory of this machine on DST and -tmpfs DST an empty tmpfs (gone with
// the node, like /run on a reboot), each made shared inside the node, as the kubelet's
// Bidirectional mounts need:
//
//	nodeinit -hostname vm-2 -private -bind /cache/node2/kubelet:/var/lib/kubelet -tmpfs /run/containerd
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reapPoll is how often the stop looks again for processes left in the node (SIGCHLD
// wakes it first when one ends).
const reapPoll = 100 * time.Millisecond

func main() {
	hostname := flag.String("hostname", "", "the node's hostname (its UTS namespace's own); unset leaves it")
	grace := flag.Duration("grace", 30*time.Second, "how long the node's processes get between SIGTERM and SIGKILL when it stops")
	private := flag.Bool("private", false, "make every mount of the node a slave of this machine's first: nothing the node mounts reaches this machine")
	var fsys []mountSpec
	flag.Func("bind", "SRC:DST: bind this machine's directory SRC on the node's DST, shared in the node (repeatable; needs -private)", func(v string) error {
		src, dst, ok := strings.Cut(v, ":")
		if !ok || !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
			return fmt.Errorf("%q: want SRC:DST, both absolute", v)
		}
		fsys = append(fsys, mountSpec{src: src, dst: dst})
		return nil
	})
	flag.Func("tmpfs", "DST: an empty tmpfs on the node's DST, shared in the node (repeatable; needs -private)", func(v string) error {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("%q: want an absolute path", v)
		}
		fsys = append(fsys, mountSpec{dst: v})
		return nil
	})
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "nodeinit")
	if flag.NArg() > 0 || *grace <= 0 || (len(fsys) > 0 && !*private) {
		fmt.Fprintln(os.Stderr, "usage: nodeinit [-hostname NAME] [-grace DURATION>0] [-private [-bind SRC:DST]... [-tmpfs DST]...]")
		os.Exit(2)
	}
	if os.Getpid() != 1 {
		fmt.Fprintf(os.Stderr, "nodeinit: pid %d: it must be PID 1 of a PID namespace of its own (unshare --pid --fork)\n", os.Getpid())
		os.Exit(2)
	}
	if *hostname != "" {
		if err := unix.Sethostname([]byte(*hostname)); err != nil {
			fmt.Fprintf(os.Stderr, "nodeinit: set hostname %q: %v\n", *hostname, err)
			os.Exit(1)
		}
	}
	if *private {
		if err := ownFilesystem(fsys); err != nil {
			fmt.Fprintf(os.Stderr, "nodeinit: %v\n", err)
			os.Exit(1)
		}
	}
	// A stop must never be lost behind a burst of SIGCHLDs: each has a channel of its own.
	// Every other signal is ignored, as the kernel does for a PID 1 without a handler (Go
	// would otherwise end the init, and the node with it, on SIGUSR1, SIGHUP, SIGQUIT...).
	stops := make(chan os.Signal, 2)
	signal.Notify(stops, syscall.SIGTERM, syscall.SIGINT)
	children := make(chan os.Signal, 1)
	signal.Notify(children, syscall.SIGCHLD)
	signal.Ignore(syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM,
		syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGWINCH)
	log.Info("node up", "hostname", *hostname)
	reap(log) // what ended before the handler was there
	for {
		select {
		case <-children:
			reap(log)
		case sig := <-stops:
			log.Info("node stopping", "signal", sig.String(), "grace", grace.String())
			os.Exit(stop(log, children, *grace))
		}
	}
}

// reap collects every process of the node that has ended, without waiting.
func reap(log *slog.Logger) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			return // no child at all
		case err != nil:
			log.Warn("wait4", "err", err)
			return
		case pid == 0:
			return // children left, none ended
		}
		log.Debug("reaped", "pid", pid, "status", int(ws))
	}
}

// stop ends every process of the node: SIGTERM, then SIGKILL past grace; it returns the
// exit code, 0 when all ended within grace, 1 when some had to be killed. It waits for every
// process of the node, not only its children: a unit started from the host
// (nsenter -t <init> -a) is the child of its nsenter there until that ends.
func stop(log *slog.Logger, children <-chan os.Signal, grace time.Duration) int {
	// kill(-1) from PID 1 of a PID namespace reaches every process of the namespace but
	// itself.
	if err := unix.Kill(-1, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
		log.Warn("SIGTERM to the node's processes", "err", err)
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(reapPoll)
	defer tick.Stop()
	start := time.Now()
	for {
		reap(log)
		left := others()
		if len(left) == 0 {
			log.Info("node stopped", "ms", time.Since(start).Milliseconds())
			return 0
		}
		select {
		case <-children:
		case <-tick.C:
		case <-deadline.C:
			log.Warn("node's processes still running past the grace period; killed", "grace", grace.String(), "pids", left)
			_ = unix.Kill(-1, unix.SIGKILL)
			for i := 0; i < 100; i++ { // SIGKILL ends them at once: bounded
				reap(log)
				if len(others()) == 0 {
					break
				}
				time.Sleep(reapPoll)
			}
			return 1
		}
	}
}

// others lists the processes of the node but this one, as its /proc (the node's own, mounted
// by unshare --mount-proc) shows them.
func others() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid != 1 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// maxStacked bounds the mounts of this machine taken off a node directory before its own.
const maxStacked = 16

// mountSpec is one of the node's own directories: this machine's src bound on dst, or an
// empty tmpfs on dst when src is empty.
type mountSpec struct{ src, dst string }

// ownFilesystem gives the node its own view of the file system: every mount a slave of this
// machine's (the node still sees what this machine mounts, and this machine nothing the node
// mounts), then fsys in order, each made shared inside the node. Only in the node's mount
// namespace: unshare --mount made it, so nothing here touches this machine's mounts.
func ownFilesystem(fsys []mountSpec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the node's mounts slaves of this machine's: %w", err)
	}
	for _, m := range fsys {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return fmt.Errorf("node directory %s: %w", m.dst, err)
		}
		// What this machine has mounted there (the first node's bind of its own state
		// directory) goes first, in the node only (its mounts are slaves now): a mount
		// stacked on it would hide it, but not from a runtime that reads the lower one in
		// mountinfo (containerd refuses a Bidirectional volume under /var/lib/kubelet: "not
		// a shared mount").
		for i := 0; ; i++ {
			err := unix.Unmount(m.dst, unix.MNT_DETACH)
			if errors.Is(err, unix.EINVAL) {
				break // not a mount point (any more)
			}
			if err != nil {
				return fmt.Errorf("unmount this machine's mount on the node's %s: %w", m.dst, err)
			}
			if i == maxStacked {
				return fmt.Errorf("the node's %s: still a mount point after %d unmounts", m.dst, maxStacked)
			}
		}
		what := "tmpfs"
		var err error
		if m.src == "" {
			err = unix.Mount("tmpfs", m.dst, "tmpfs", 0, "mode=0755")
		} else {
			what = m.src
			err = unix.Mount(m.src, m.dst, "", unix.MS_BIND|unix.MS_REC, "")
		}
		if err != nil {
			return fmt.Errorf("mount %s on the node's %s: %w", what, m.dst, err)
		}
		if err := unix.Mount("", m.dst, "", unix.MS_SHARED, ""); err != nil {
			return fmt.Errorf("make the node's %s shared: %w", m.dst, err)
		}
	}
	return nil
}
