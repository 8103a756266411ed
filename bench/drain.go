package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testenv"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/exitfile"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podpath"
)

// Timings of the "still writing" data-loss check. The writers get their SIGTERM a moment
// after they started writing, so every one has a file open and half written when the
// trigger arrives; each then finishes its file, as a well-behaved app does within its
// grace period.
const (
	drainWriters     = 4
	drainFileSize    = 1 << 20
	drainChunkDelay  = 10 * time.Millisecond // 16 chunks of 64 KiB: ~160 ms per file
	slowChunkDelay   = 100 * time.Millisecond
	drainTriggerWait = 60 * time.Millisecond // writers started -> trigger
	drainExitBound   = 30 * time.Second
)

// drainScenario is one way a pod ends while its containers still write.
type drainScenario struct {
	name string
	// mode is the sidecar mode; initContainers is set for a native sidecar serving an init
	// container (the only native case where SIGTERM can come while a writer runs).
	mode, initContainers string
	// specGrace is the pod spec's grace (the sidecar's env); terminatingGrace, when > 0, is
	// the deletion's grace the node plugin writes into the terminating file.
	specGrace, terminatingGrace int
	// exitFile: the node plugin writes the exit file once the writers have exited (false:
	// the node plugin is away and only the drain deadline ends the sidecar).
	exitFile bool
	// chunkDelay paces the writers.
	chunkDelay time.Duration
}

var drainScenarios = []drainScenario{
	{name: "native SIGTERM, init container writing", mode: contract.ModeNative, initContainers: "seed", specGrace: 30, exitFile: true, chunkDelay: drainChunkDelay},
	{name: "legacy deletion (SIGTERM, then exit file)", mode: contract.ModeLegacy, specGrace: 30, terminatingGrace: 30, exitFile: true, chunkDelay: drainChunkDelay},
	{name: "deletion --grace-period 4 > spec 1, no exit file", mode: contract.ModeLegacy, specGrace: 1, terminatingGrace: 4, chunkDelay: slowChunkDelay},
	{name: "deadline kill (SIGTERM, no deletion)", mode: contract.ModeLegacy, specGrace: 30, exitFile: true, chunkDelay: drainChunkDelay},
}

// dataLossWriting is the data-loss check where it can fail: the writers still have their
// files open and are writing when the trigger arrives. It runs iterations over the
// scenarios in turn, then the first two scenarios again with the sidecar's drain switched
// off, to show the check catches a loss.
func (b *bench) dataLossWriting(iterations, offIterations int) error {
	workload := filepath.Join(b.dir, "workload")
	if err := goBuild(workload, "./test/e2e/workload"); err != nil {
		return err
	}
	fmt.Printf("## data loss while writing: %d writer processes are mid-file when the trigger arrives; %d iterations\n", drainWriters, iterations)
	run := func(sc drainScenario, drain bool, n int) (objects, lost int, s stats, err error) {
		for i := range n {
			o, l, d, err := b.drainOnce(workload, sc, drain)
			if err != nil {
				return objects, lost, s, fmt.Errorf("%s, iteration %d: %w", sc.name, i, err)
			}
			objects += o
			lost += l
			s = append(s, d)
		}
		return objects, lost, s, nil
	}
	totalLost := 0
	per := max(iterations/len(drainScenarios), 1)
	for _, sc := range drainScenarios {
		objs, lost, s, err := run(sc, true, per)
		if err != nil {
			return err
		}
		totalLost += lost
		fmt.Printf("  %-50s n=%d  objects %d  lost or short %d  trigger -> sidecar exit %s\n", sc.name, per, objs, lost, s)
	}
	fmt.Printf("  drain switched off (sidecar --drain=false), %d iterations each:\n", offIterations)
	for _, sc := range drainScenarios[:2] {
		objs, lost, s, err := run(sc, false, offIterations)
		if err != nil {
			return err
		}
		fmt.Printf("  %-50s n=%d  objects %d  lost or short %d  trigger -> sidecar exit %s\n", sc.name, offIterations, objs, lost, s)
	}
	if totalLost > 0 {
		return fmt.Errorf("%d objects lost or short with the drain on", totalLost)
	}
	return nil
}

// drainOnce mounts one volume, starts the writers, sends the trigger mid-write (SIGTERM to
// the writers and the sidecar together, as the kubelet does; the terminating file as the
// node plugin does on a deletion), writes the exit file once the writers have exited when
// the scenario has a node plugin, and counts the objects that are missing or short.
func (b *bench) drainOnce(workload string, sc drainScenario, drain bool) (objects, lost int, exit time.Duration, err error) {
	e, err := b.env()
	if err != nil {
		return 0, 0, 0, err
	}
	defer e.Close()
	bucket := b.bucket()
	pod, err := e.NewPod()
	if err != nil {
		return 0, 0, 0, err
	}
	if err := pod.Publish(ctx(), "data", bucket, "", false); err != nil {
		return 0, 0, 0, err
	}
	side, err := startSidecar(b.sidecarBin, e, pod, sc, drain)
	if err != nil {
		return 0, 0, 0, err
	}
	defer side.kill()
	target := pod.Target("data")
	if _, err := testenv.WaitReady(target, 20*time.Second); err != nil {
		return 0, 0, 0, fmt.Errorf("%w\n%s", err, side.output())
	}
	writers := make([]*exec.Cmd, drainWriters)
	for i := range writers {
		writers[i] = exec.Command(workload, "write", "-dir", target, "-name", fmt.Sprintf("part-%d.bin", i),
			"-bytes", strconv.Itoa(drainFileSize), "-chunk-delay", sc.chunkDelay.String(), "-finish-on-term")
		if err := writers[i].Start(); err != nil {
			return 0, 0, 0, err
		}
	}
	time.Sleep(drainTriggerWait)
	if sc.terminatingGrace > 0 {
		dir, err := podpath.OpenDir(pod.TmpDir)
		if err != nil {
			return 0, 0, 0, err
		}
		err = exitfile.WriteTerminating(dir, exitfile.Terminating{GraceSeconds: int64(sc.terminatingGrace), DeletionTimestamp: time.Now()})
		dir.Close()
		if err != nil {
			return 0, 0, 0, err
		}
	}
	t0 := time.Now()
	for _, w := range writers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	_ = side.cmd.Process.Signal(syscall.SIGTERM)
	for _, w := range writers {
		_ = w.Wait() // a failed write shows as a short object below
	}
	if sc.exitFile {
		if err := exitfile.Write(e.Root, pod.UID, exitfile.Reason{Rule: "bench-writers-exited"}); err != nil {
			return 0, 0, 0, err
		}
	}
	select {
	case <-side.done:
	case <-time.After(drainExitBound):
		return 0, 0, 0, fmt.Errorf("sidecar still running %s after the trigger\n%s", drainExitBound, side.output())
	}
	for i := range drainWriters {
		o, err := b.emu.GetObject(bucket, fmt.Sprintf("part-%d.bin", i))
		if err != nil || len(o.Content) != drainFileSize {
			lost++
		}
	}
	return drainWriters, lost, side.exited.Sub(t0), nil
}

// benchSidecar is a sidecar process started with a scenario's environment.
type benchSidecar struct {
	cmd    *exec.Cmd
	log    string // its output, a file: no copying goroutine, readable at any time
	done   chan struct{}
	exited time.Time
}

func (s *benchSidecar) output() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

func (s *benchSidecar) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

func startSidecar(bin string, e *testenv.Env, pod *testenv.Pod, sc drainScenario, drain bool) (*benchSidecar, error) {
	cmd := exec.Command(bin, "--tmp-dir="+pod.TmpDir, "--gcsfuse="+e.GcsfuseBin,
		"--termination-log="+filepath.Join(pod.TmpDir, "termination-log"), "--drain="+strconv.FormatBool(drain))
	cmd.Env = []string{contract.EnvSidecarMode + "=" + sc.mode, contract.EnvGraceSeconds + "=" + strconv.Itoa(sc.specGrace)}
	if sc.initContainers != "" {
		cmd.Env = append(cmd.Env, contract.EnvInitContainers+"="+sc.initContainers)
	}
	log := filepath.Join(pod.TmpDir, "..", "sidecar.log")
	out, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child has its own copy
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: contract.SidecarUID, Gid: contract.SidecarGID},
		Setpgid:    true,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	s := &benchSidecar{cmd: cmd, log: log, done: make(chan struct{})}
	go func() { // owned by s: reaps the process
		_ = cmd.Wait()
		s.exited = time.Now()
		close(s.done)
	}()
	return s, nil
}

// goBuild builds a package of this module into out.
func goBuild(out, pkg string) error {
	modRoot, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(modRoot)))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return os.Chmod(out, 0o755)
}
