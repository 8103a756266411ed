// Command gcsfuse-sidecar runs in each pod that mounts a bucket, as uid 65534 with no
// capabilities: it receives FUSE descriptors from the node plugin and runs gcsfuse on them.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/mountopts"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sidecar"
)

func main() { os.Exit(run()) }

func run() int {
	tmpDir := flag.String("tmp-dir", contract.TmpMountPath, "mount path of the "+contract.TmpVolumeName+" emptyDir")
	cacheDir := flag.String("cache-dir", existingDir(contract.CacheMountPath), "gcsfuse file cache root (default: "+contract.CacheMountPath+" when mounted)")
	bufferDir := flag.String("buffer-dir", existingDir(contract.BufferMountPath), "root of gcsfuse's write staging dirs (default: "+contract.BufferMountPath+" when mounted, else inside --tmp-dir)")
	gcsfuse := flag.String("gcsfuse", "/gcsfuse", "path of the gcsfuse binary")
	mode := flag.String("mode", envOr(contract.EnvSidecarMode, contract.ModeLegacy), "native, legacy, or shared for the node's mounter (default from $"+contract.EnvSidecarMode+")")
	grace := flag.Int("grace-seconds", envInt(contract.EnvGraceSeconds, contract.DefaultGraceSeconds), "pod terminationGracePeriodSeconds (default from $"+contract.EnvGraceSeconds+")")
	initContainers := flag.String("init-containers", os.Getenv(contract.EnvInitContainers), "comma separated regular init containers that mount a gcsfuse volume and start after a native sidecar (default from $"+contract.EnvInitContainers+")")
	drain := flag.Bool("drain", true, "on SIGTERM, keep serving until the containers that use the mounts have exited (false only to measure what the drain saves in the data-loss benchmark)")
	memLimit := flag.String("gcsfuse-memory-limit", "", "each gcsfuse's memory limit, a quantity such as 512Mi (empty or 0: none): the node's mounter runs every sharing key's gcsfuse in one container, and one past this ends alone instead of taking the container, and every key, past its limit")
	termLog := flag.String("termination-log", "/dev/termination-log", "file for the reason of a failed exit")
	verbose := flag.Bool("v", false, "debug logging")
	waitExit := flag.Bool(strings.TrimPrefix(contract.PreStopWaitFlag, "-"), false, "run as the legacy sidecar's preStop hook: wait for the exit file, at most the grace period, then return")
	flag.Parse()

	lvl := slog.LevelInfo
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if ns, name := os.Getenv(contract.EnvPodNamespace), os.Getenv(contract.EnvPodName); name != "" {
		log = log.With("pod", ns+"/"+name) // every line names the pod; volume lines add the volume
	}
	if *mode != contract.ModeNative && *mode != contract.ModeLegacy && *mode != contract.ModeShared {
		log.Error("invalid mode", "mode", *mode, "want", contract.ModeNative+", "+contract.ModeLegacy+" or "+contract.ModeShared)
		return 2
	}
	if *grace < 0 {
		log.Error("invalid grace period", "seconds", *grace)
		return 2
	}
	memLimitBytes, err := sidecar.ParseMemory(*memLimit)
	if err != nil {
		log.Error("invalid --gcsfuse-memory-limit", "err", err)
		return 2
	}
	if *waitExit {
		if err := sidecar.WaitExit(context.Background(), *tmpDir, time.Duration(*grace)*time.Second, log); err != nil {
			log.Warn("preStop hook ends without the exit file", "err", err)
		}
		return 0 // a failed hook only adds a FailedPreStopHook Event; the kubelet goes on either way
	}
	if os.Geteuid() == 0 {
		log.Warn("running as root: the sidecar is meant to run as uid 65534 with no capabilities")
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if *mode == contract.ModeShared {
		if err := waitWritable(*tmpDir, sigs, log); err != nil {
			log.Error("the mounter's directory is not ready", "dir", *tmpDir, "err", err)
			return 1
		}
	}
	s, err := sidecar.New(sidecar.Config{
		TmpDir: *tmpDir, CacheDir: *cacheDir, BufferDir: *bufferDir, GcsfusePath: *gcsfuse, Mode: *mode,
		Grace: time.Duration(*grace) * time.Second, Drain: *drain, InitContainers: mountopts.Split(*initContainers),
		TerminationLog: *termLog, Log: log, GcsfuseMemoryLimit: memLimitBytes,
		CredentialConfig: []byte(os.Getenv(contract.EnvCredentialConfig)), CredentialConfigMap: os.Getenv(contract.EnvCredentialConfigMap),
	})
	if err != nil {
		log.Error("invalid configuration", "err", err)
		return 2
	}
	return s.Run(context.Background(), sigs)
}

// Waits of the shared mounter for its host directory.
const (
	// tmpDirReadyWait bounds the wait for the node plugin to hand the mounter its directory:
	// the kubelet creates the hostPath as root, and the node plugin gives it to uid 65534 when
	// it starts, which may be after the mounter. Past it the container exits 1 and the
	// kubelet restarts it.
	tmpDirReadyWait = 2 * time.Minute
	// tmpDirPollInterval is how often it looks.
	tmpDirPollInterval = 200 * time.Millisecond
)

// waitWritable waits, at most tmpDirReadyWait, until dir is a directory this process may
// write in.
func waitWritable(dir string, stop <-chan os.Signal, log *slog.Logger) error {
	deadline := time.Now().Add(tmpDirReadyWait)
	logged := false
	for {
		err := unix.Access(dir, unix.W_OK|unix.X_OK)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not writable by uid %d after %s (the node plugin gives it to the mounter at start; is it running with --shared-dir?): %w", os.Getuid(), tmpDirReadyWait, err)
		}
		if !logged {
			log.Info("waiting for the node plugin to hand over the mounter's directory", "dir", dir, "err", err)
			logged = true
		}
		select {
		case sig := <-stop:
			return fmt.Errorf("%s while waiting", sig)
		case <-time.After(tmpDirPollInterval):
		}
	}
}

// existingDir returns p if it is a directory (the webhook mounted that volume), else "".
func existingDir(p string) string {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return p
	}
	return ""
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gcsfuse-sidecar: $%s=%q is not an integer; using %d\n", k, v, def)
		return def
	}
	return n
}
