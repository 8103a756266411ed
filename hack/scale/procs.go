package main

import (
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/procs"

	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// pids are every process of the host but kernel threads.
func pids() []int { return procs.PIDs(func([]string) bool { return true }) }

// argv0 is the base name of pid's command ("" once it has ended).
func argv0(pid int) string {
	if args := procs.Args(pid); len(args) > 0 {
		return filepath.Base(args[0])
	}
	return ""
}

// statFields are the fields of /proc/<pid>/stat after the command's closing parenthesis
// (field 3, the state, first).
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

func parentPID(pid int) int {
	f := statFields(pid)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func cpuSeconds(pid int) float64 {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / clockTicks
}

// statusField is the value of key in /proc/<pid>/status, split in fields.
func statusField(status []byte, key string) []string {
	for l := range strings.SplitSeq(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == key+":" {
			return f[1:]
		}
	}
	return nil
}

func statusKiB(pid int, key string) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	f := statusField(b, key)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// effectiveUID reads the effective uid (the second of Uid's four) from /proc/<pid>/status:
// inotify instances are charged to it.
func effectiveUID(status []byte) (int, bool) {
	f := statusField(status, "Uid")
	if len(f) < 2 {
		return 0, false
	}
	uid, err := strconv.Atoi(f[1])
	return uid, err == nil
}

type peaks struct {
	nodeRSS         float64
	gcsfuse         []float64 // peak RSS of each gcsfuse process, MiB
	sidecar         []float64
	maxGcsfuse      int
	gcsfuseBy       map[int]float64
	sidecarBy       map[int]float64
	stopC, stoppedC chan struct{}
}

// startSampler samples the node plugin's RSS and every gcsfuse and sidecar process's RSS
// until stop.
func startSampler(nodePID int) *peaks {
	p := &peaks{gcsfuseBy: map[int]float64{}, sidecarBy: map[int]float64{}, stopC: make(chan struct{}), stoppedC: make(chan struct{})}
	go func() { // owned by the phase: ends at stop
		defer close(p.stoppedC)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			p.nodeRSS = max(p.nodeRSS, statusKiB(nodePID, "VmRSS")/1024)
			n := 0
			for _, pid := range pids() {
				switch argv0(pid) {
				case gcsfuseCommand:
					if argv0(parentPID(pid)) != sidecarCommand {
						continue // not a pod's (another session's test, perhaps)
					}
					n++
					p.gcsfuseBy[pid] = max(p.gcsfuseBy[pid], statusKiB(pid, "VmRSS")/1024)
				case sidecarCommand:
					p.sidecarBy[pid] = max(p.sidecarBy[pid], statusKiB(pid, "VmRSS")/1024)
				}
			}
			p.maxGcsfuse = max(p.maxGcsfuse, n)
			select {
			case <-p.stopC:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *peaks) stop() *peaks {
	close(p.stopC)
	<-p.stoppedC
	for _, v := range p.gcsfuseBy {
		if v > 0 {
			p.gcsfuse = append(p.gcsfuse, v)
		}
	}
	for _, v := range p.sidecarBy {
		if v > 0 {
			p.sidecar = append(p.sidecar, v)
		}
	}
	return p
}
