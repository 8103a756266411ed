package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/emulator"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// mountTimeout bounds the wait for a mount to answer.
const mountTimeout = 30 * time.Second

// bucketFor is the bucket a suite gets in the modes that make their own: one per suite, so
// that no package sees another's leftovers.
func bucketFor(s Suite) string {
	return "itest-" + strings.ReplaceAll(strings.ReplaceAll(s.Name, "/", "-"), "_", "-")
}

// standalone runs each suite against gcsfuse itself: the emulator in this process, a
// bucket per suite, `gcsfuse --foreground` mounted by this process (root, so no
// allow_other is needed) with the suite's options, as upstream's run_tests_mounted_directory.sh
// mounts it, then unmounted and the bucket emptied.
func standalone(ctx context.Context, r *runner, gcsfuse string, ss []Suite) (*Report, error) {
	emu, err := emulator.Start("127.0.0.1", 0)
	if err != nil {
		return nil, err
	}
	defer emu.Stop()
	r.emulatorURL = emu.URL
	return eachSuite(ctx, r, "standalone", ss, func(s Suite) SuiteReport { return standaloneSuite(ctx, r, emu, gcsfuse, s) }), nil
}

// eachSuite runs one suite after the other with one, timing and printing each, until ctx
// ends, and returns the mode's report.
func eachSuite(ctx context.Context, r *runner, mode string, ss []Suite, one func(Suite) SuiteReport) *Report {
	rep := &Report{Mode: mode}
	for _, s := range ss {
		start := time.Now()
		sr := one(s)
		sr.Seconds = time.Since(start).Seconds()
		rep.merge(sr)
		printSuite(r.log, sr)
		if ctx.Err() != nil {
			break
		}
	}
	return rep
}

func standaloneSuite(ctx context.Context, r *runner, emu *emulator.Server, gcsfuse string, s Suite) SuiteReport {
	bucket := bucketFor(s)
	sdir := r.suiteDir(s)
	dir := filepath.Join(sdir, "mnt")
	base := SuiteReport{Suite: s.Name, Package: s.Package, Options: s.MountOptions(), Dir: dir, Bucket: bucket}
	if err := r.freshSuiteDir(s); err != nil {
		return failed(base, err.Error())
	}
	for _, d := range []string{dir, filepath.Join(sdir, "gcsfuse-tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return failed(base, err.Error())
		}
	}
	emu.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	defer emptyBucket(emu, bucket)
	args := append([]string{"--foreground", "--anonymous-access", "--custom-endpoint=" + emu.Endpoint,
		"--temp-dir=" + filepath.Join(sdir, "gcsfuse-tmp"), "--log-file=" + filepath.Join(sdir, "gcsfuse.log")},
		s.GcsfuseArgs()...)
	args = append(args, bucket, dir)
	out, err := os.Create(filepath.Join(sdir, "gcsfuse.out"))
	if err != nil {
		return failed(base, err.Error())
	}
	defer out.Close()
	cmd := exec.Command(gcsfuse, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return failed(base, fmt.Sprintf("gcsfuse: %v", err))
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // ends when gcsfuse does (after the unmount below)
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := fusemount.Unmount(uctx, dir, 200*time.Millisecond); err != nil {
			fmt.Fprintf(r.log, "%s: unmount %s: %v\n", s.Name, dir, err)
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	if err := waitMounted(dir, exited); err != nil {
		return failed(base, fmt.Sprintf("gcsfuse %s: %v (%s)", strings.Join(args, " "), err, tail(filepath.Join(sdir, "gcsfuse.out"))))
	}
	return r.run(ctx, s, dir, bucket)
}

// waitMounted waits until dir is a FUSE mount that answers a stat, or gcsfuse exits.
func waitMounted(dir string, exited <-chan error) error {
	deadline := time.Now().Add(mountTimeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("gcsfuse exited before mounting: %v", err)
		default:
		}
		if m, err := fusemount.Lookup(dir); err == nil && m != nil && strings.HasPrefix(m.FSType, "fuse") {
			_, err := testenv.WaitReady(dir, mountTimeout)
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not mounted after %s", mountTimeout)
}

// emptyBucket deletes the bucket's objects and the bucket: the emulator holds them in memory
// (the large-file packages write gigabytes).
func emptyBucket(emu *emulator.Server, bucket string) {
	b := emu.Backend()
	objs, err := b.ListObjects(bucket, "", true)
	if err == nil {
		for _, o := range objs {
			_ = b.DeleteObjectWithGeneration(bucket, o.Name, o.Generation)
			_ = b.DeleteObject(bucket, o.Name)
		}
	}
	_ = b.DeleteBucket(bucket)
}

// tail is the last lines of a file, on one line.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}

// driver runs each suite against this driver's data path without a cluster: the node
// plugin in this process (test/internal/testenv), the real sidecar binary as uid 65534
// and the real gcsfuse, serving a pod's volume of the suite's bucket with the suite's
// options as mountOptions, exactly what `flags` prints for the mounted mode. The mount is
// the node plugin's (allow_other, default_permissions, owned by uid 65534).
func driver(ctx context.Context, r *runner, sidecar string, ss []Suite) (*Report, error) {
	emu, err := emulator.Start("127.0.0.1", 0)
	if err != nil {
		return nil, err
	}
	defer emu.Stop()
	r.emulatorURL = emu.URL
	env, err := testenv.New(testenv.Options{Emulator: emu, SidecarBin: sidecar, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	defer env.Close()
	return eachSuite(ctx, r, "driver", ss, func(s Suite) SuiteReport { return driverSuite(ctx, r, env, emu, s) }), nil
}

func driverSuite(ctx context.Context, r *runner, env *testenv.Env, emu *emulator.Server, s Suite) SuiteReport {
	bucket := bucketFor(s)
	base := SuiteReport{Suite: s.Name, Package: s.Package, Options: s.MountOptions(), Bucket: bucket}
	if err := r.freshSuiteDir(s); err != nil {
		return failed(base, err.Error())
	}
	emu.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	defer emptyBucket(emu, bucket)
	pod, err := env.NewPod()
	if err != nil {
		return failed(base, err.Error())
	}
	const vol = "data"
	base.Dir = pod.Target(vol)
	if err := pod.Publish(ctx, vol, bucket, s.MountOptions(), false); err != nil {
		return failed(base, fmt.Sprintf("NodePublishVolume with mountOptions %q: %v", s.MountOptions(), err))
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := pod.Unpublish(uctx, vol); err != nil {
			fmt.Fprintf(r.log, "%s: NodeUnpublishVolume: %v\n", s.Name, err)
		}
	}()
	sc, err := pod.StartSidecar(contract.ModeNative, 30, nil)
	if err != nil {
		return failed(base, fmt.Sprintf("sidecar: %v", err))
	}
	defer func() {
		_ = syscall.Kill(-sc.Cmd.Process.Pid, syscall.SIGKILL)
		_, _ = sc.Wait(10 * time.Second)
		_ = os.WriteFile(filepath.Join(r.suiteDir(s), "sidecar.log"), []byte(sc.Output()), 0o644)
	}()
	if _, err := testenv.WaitReady(base.Dir, mountTimeout); err != nil {
		return failed(base, fmt.Sprintf("volume not served: %v (sidecar: %s)", err, lastLine(sc.Output())))
	}
	return r.run(ctx, s, base.Dir, bucket)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// mounted runs one suite against a mount someone else made (a pod's volume, seen from the
// host) of bucket, in the emulator at emulatorURL.
func mounted(ctx context.Context, r *runner, s Suite, dir, bucket string) SuiteReport {
	start := time.Now()
	base := SuiteReport{Suite: s.Name, Package: s.Package, Options: s.MountOptions(), Dir: dir, Bucket: bucket}
	var sr SuiteReport
	if err := r.freshSuiteDir(s); err != nil {
		sr = failed(base, err.Error())
	} else if m, err := fusemount.Lookup(dir); err != nil || m == nil || !strings.HasPrefix(m.FSType, "fuse") {
		sr = failed(base, fmt.Sprintf("%s is not a FUSE mount (%v)", dir, err))
	} else if _, err := testenv.WaitReady(dir, mountTimeout); err != nil {
		sr = failed(base, fmt.Sprintf("%s does not answer: %v", dir, err))
	} else {
		sr = r.run(ctx, s, dir, bucket)
	}
	sr.Seconds = time.Since(start).Seconds()
	printSuite(r.log, sr)
	return sr
}

// printSuite prints a suite's counts and failures as it ends.
func printSuite(w io.Writer, s SuiteReport) {
	p, f, sk := s.counts()
	fmt.Fprintf(w, "--- %s: %d passed, %d failed, %d skipped in %.1f s\n", s.Suite, p, f, sk, s.Seconds)
	if s.Error != "" {
		fmt.Fprintf(w, "    error: %s\n", s.Error)
	}
	for _, t := range leaves(s.Tests) {
		if t.Action == "fail" {
			fmt.Fprintf(w, "    FAIL %s: %s\n", t.Name, t.Reason)
		}
	}
}
