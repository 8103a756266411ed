package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/syncbuf"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/test/internal/testenv"
)

// Timings of the "still writing" data-loss check. The writers get their SIGTERM a moment
// after they started writing, so every one has a file open and half written when the
// trigger arrives; each then finishes its file, as a well-behaved app does within its
// grace period.
const (
	drainWriters    = 4
	drainFileSize   = 1 << 20
	drainChunkDelay = 10 * time.Millisecond // 16 chunks of 64 KiB: ~160 ms per file
	slowChunkDelay  = 100 * time.Millisecond
	// drainStartBound bounds the wait for every writer to have its file open: the trigger
	// comes once all have (a writer SIGTERMed before it set its handler up would die without
	// a file, a loss of the bench's timing, not of the driver's).
	drainStartBound = 10 * time.Second
	drainStartPoll  = 2 * time.Millisecond
	drainExitBound  = 30 * time.Second
)

// drainScenario is one way a pod ends while its containers still write.
type drainScenario struct {
	name string
	// short is the name in the README's table, among the others.
	short string
	// mode is the sidecar mode; initContainers is set for a native sidecar serving an init
	// container (the only native case where SIGTERM can come while a writer runs).
	mode           string
	initContainers []string
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
	{name: "native SIGTERM, init container writing", short: "native SIGTERM during the init phase", mode: contract.ModeNative, initContainers: []string{"seed"}, specGrace: 30, exitFile: true, chunkDelay: drainChunkDelay},
	{name: "legacy deletion (SIGTERM, then exit file)", short: "legacy deletion", mode: contract.ModeLegacy, specGrace: 30, terminatingGrace: 30, exitFile: true, chunkDelay: drainChunkDelay},
	{name: "deletion --grace-period 4 > spec 1, no exit file", short: "`--grace-period` 4 > spec 1 s with no exit file", mode: contract.ModeLegacy, specGrace: 1, terminatingGrace: 4, chunkDelay: slowChunkDelay},
	{name: "deadline kill (SIGTERM, no deletion)", short: "deadline kill", mode: contract.ModeLegacy, specGrace: 30, exitFile: true, chunkDelay: drainChunkDelay},
}

// dataLossWriting is the data-loss check where it can fail: the writers still have their
// files open and are writing when the trigger arrives. It runs iterations over the
// scenarios in turn, then the first two scenarios again with the sidecar's drain switched
// off, to show the check catches a loss.
func (b *bench) dataLossWriting(iterations, offIterations int) error {
	workload := filepath.Join(b.dir, "workload")
	if err := testenv.GoBuild(workload, "./test/e2e/workload"); err != nil {
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
	res := &writingResult{perScenario: per, offIterations: offIterations}
	for _, sc := range drainScenarios {
		objs, lost, s, err := run(sc, true, per)
		if err != nil {
			return err
		}
		totalLost += lost
		res.on = append(res.on, scenarioResult{sc: sc, objects: objs, lost: lost, s: s})
		fmt.Printf("  %-50s n=%d  objects %d  lost or short %d  trigger -> sidecar exit %s\n", sc.name, per, objs, lost, s)
	}
	fmt.Printf("  drain switched off (sidecar --drain=false), %d iterations each:\n", offIterations)
	for _, sc := range drainScenarios[:2] {
		objs, lost, s, err := run(sc, false, offIterations)
		if err != nil {
			return err
		}
		res.off = append(res.off, scenarioResult{sc: sc, objects: objs, lost: lost, s: s})
		fmt.Printf("  %-50s n=%d  objects %d  lost or short %d  trigger -> sidecar exit %s\n", sc.name, offIterations, objs, lost, s)
	}
	b.res.writing = res
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
	side, err := pod.StartSidecarWith(testenv.SidecarOptions{Mode: sc.mode, GraceSeconds: sc.specGrace,
		InitContainers: sc.initContainers, Args: []string{"--drain=" + strconv.FormatBool(drain)}})
	if err != nil {
		return 0, 0, 0, err
	}
	target := pod.Target("data")
	if _, err := testenv.WaitReady(target, 20*time.Second); err != nil {
		return 0, 0, 0, fmt.Errorf("%w\n%s", err, side.Output())
	}
	writers := make([]*exec.Cmd, drainWriters)
	outs := make([]*syncbuf.Buffer, drainWriters)
	waited := make([]bool, drainWriters)
	defer func() { // a writer left by an early return
		for i, w := range writers {
			if w != nil && w.Process != nil && !waited[i] {
				_ = w.Process.Kill()
				_ = w.Wait()
			}
		}
	}()
	for i := range writers {
		writers[i] = exec.Command(workload, "write", "-dir", target, "-name", fmt.Sprintf("part-%d.bin", i),
			"-bytes", strconv.Itoa(drainFileSize), "-chunk-delay", sc.chunkDelay.String(), "-finish-on-term")
		outs[i] = &syncbuf.Buffer{}
		writers[i].Stdout, writers[i].Stderr = outs[i], outs[i]
		if err := writers[i].Start(); err != nil {
			return 0, 0, 0, err
		}
	}
	// Every writer mid-file: its file created (after its SIGTERM handler is set up).
	for i, deadline := 0, time.Now().Add(drainStartBound); i < drainWriters; {
		if _, err := os.Stat(filepath.Join(target, fmt.Sprintf("part-%d.bin", i))); err == nil {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("writer %d has no file after %s\n%s", i, drainStartBound, outs[i].String())
		}
		time.Sleep(drainStartPoll)
	}
	if sc.terminatingGrace > 0 {
		dir, err := pod.OpenTmpDir()
		if err != nil {
			return 0, 0, 0, err
		}
		err = podfiles.WriteTerminating(dir, podfiles.Terminating{GraceSeconds: int64(sc.terminatingGrace), DeletionTimestamp: time.Now()})
		dir.Close()
		if err != nil {
			return 0, 0, 0, err
		}
	}
	t0 := time.Now()
	for _, w := range writers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	_ = side.Signal(syscall.SIGTERM)
	closed := make([]bool, drainWriters) // the writer exited 0: its close succeeded
	for i, w := range writers {
		closed[i] = w.Wait() == nil // a failed write shows as a short object below
		waited[i] = true
	}
	if sc.exitFile {
		if err := podfiles.Write(e.Root, pod.UID, podfiles.Reason{Rule: "bench-writers-exited"}); err != nil {
			return 0, 0, 0, err
		}
	}
	if _, err := side.Wait(drainExitBound); err != nil {
		return 0, 0, 0, fmt.Errorf("after the trigger: %w\n%s", err, side.Output())
	}
	for i := range drainWriters {
		o, err := b.emu.GetObject(bucket, fmt.Sprintf("part-%d.bin", i))
		if err != nil || len(o.Content) != drainFileSize {
			lost++
			if closed[i] && drain {
				// The one outcome never acceptable: the app's close succeeded, the object is
				// not whole.
				return 0, 0, 0, fmt.Errorf("part-%d.bin: the writer exited 0 (its close succeeded) and the object is missing or short (%v)\nwriter:\n%s\nsidecar:\n%s",
					i, err, outs[i].String(), side.Output())
			}
			if drain {
				fmt.Printf("  lost part-%d.bin (%s), the writer failed:\n%s\n", i, sc.name, outs[i].String())
			}
		}
	}
	return drainWriters, lost, side.Exited.Sub(t0), nil
}
