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
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
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
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "nodeinit")
	if flag.NArg() > 0 || *grace <= 0 {
		fmt.Fprintln(os.Stderr, "usage: nodeinit [-hostname NAME] [-grace DURATION>0]")
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
