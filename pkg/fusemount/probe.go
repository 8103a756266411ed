package fusemount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// ProbeTimeout is how long Dead waits for a mount to answer a statfs. A FUSE server that is
// alive answers at once; one that was never started, or whose descriptor is gone, makes the
// kernel answer ENOTCONN at once. A statfs still pending then is a live but slow server.
const ProbeTimeout = 2 * time.Second

// probeArg, as the first argument, makes a binary that calls RunProbeIfAsked a probe.
const probeArg = "__gcsfuse-csi-stat-probe"

// Exit codes of a probe process.
const (
	probeAlive    = 0
	probeDead     = 3
	probeOtherErr = 4
)

// RunProbeIfAsked makes this process a statfs probe when Dead started it, and exits; in any
// other process it returns at once. Binaries that call Dead (the node plugin, and test
// binaries of packages that reach it) call it first thing in main or TestMain.
func RunProbeIfAsked() {
	if len(os.Args) != 3 || os.Args[1] != probeArg {
		return
	}
	// statfs, not stat: the kernel answers a stat of the mount point from its attribute
	// cache while that is valid (gcsfuse's TTL), even after the connection died, whereas
	// FUSE_STATFS always goes to the server (an aborted connection: ENOTCONN at once).
	var st syscall.Statfs_t
	err := syscall.Statfs(os.Args[2], &st)
	switch {
	case err == nil:
		os.Exit(probeAlive)
	case errors.Is(err, syscall.ENOTCONN):
		os.Exit(probeDead)
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(probeOtherErr)
}

// Dead reports whether the FUSE mount at target lost its server: a statfs of it fails at
// once with ENOTCONN (a stat can still be answered from the kernel's attribute cache). The
// statfs runs in a child process (this binary again, see RunProbeIfAsked):
// a stat of a mount whose server does not answer blocks in the kernel, and only a process
// can be killed out of that wait, so nothing is left behind when the server never answers.
// A mount that does not answer within timeout is taken as alive; so is any error other than
// ENOTCONN.
func Dead(ctx context.Context, target string, timeout time.Duration) (bool, error) {
	self, err := os.Executable()
	if err != nil {
		return false, fmt.Errorf("probe %s: %w", target, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, probeArg, target)
	cmd.WaitDelay = time.Second // the kill is SIGKILL; the pipes close with the process
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, nil
	case ctx.Err() != nil:
		return false, nil // pending: alive but slow
	case errors.As(err, &exit) && exit.ExitCode() == probeDead:
		return true, nil
	case errors.As(err, &exit) && exit.ExitCode() == probeOtherErr:
		return false, nil
	}
	return false, fmt.Errorf("probe %s: %w", target, err)
}
