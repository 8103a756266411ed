package nodevolume_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/needs"
	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/podevents"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/fusemount"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
)

// An unpublished target is unmounted and its directory removed; a target that is not
// mounted, or already gone, is a success; a directory that cannot be removed is Internal
// naming the target.
func TestUnmountTargetRemovesTheDirectory(t *testing.T) {
	ctx := context.Background()
	plain := filepath.Join(t.TempDir(), "mount")
	if err := os.Mkdir(plain, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := nodevolume.UnmountTarget(ctx, plain, time.Second); err != nil {
		t.Fatalf("UnmountTarget of a directory not mounted: %v", err)
	}
	if _, err := os.Stat(plain); !os.IsNotExist(err) {
		t.Fatalf("the target directory stayed: %v", err)
	}
	if err := nodevolume.UnmountTarget(ctx, plain, time.Second); err != nil {
		t.Fatalf("UnmountTarget of a target already gone: %v", err)
	}
	full := filepath.Join(t.TempDir(), "mount")
	if err := os.MkdirAll(filepath.Join(full, "left"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := nodevolume.UnmountTarget(ctx, full, time.Second); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), full) {
		t.Fatalf("UnmountTarget of a directory that is not empty: %v, want Internal naming it", err)
	}
}

// A mounted target is unmounted before its directory goes (a tmpfs stands in for the FUSE
// mount: the unmount is the same).
func TestUnmountTargetUnmountsFirst(t *testing.T) {
	needs.Root(t)
	target := filepath.Join(t.TempDir(), "mount")
	if err := os.Mkdir(target, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("none", target, "tmpfs", 0, ""); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	if err := nodevolume.UnmountTarget(context.Background(), target, time.Second); err != nil {
		t.Fatalf("UnmountTarget of a mounted target: %v", err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the target stayed: %v", err)
	}
}

// A read-ahead the kernel refuses leaves a ReadAheadFailed Warning on the volume's pod,
// naming the volume and the value; a volume without read_ahead_kb sets nothing and says
// nothing.
func TestApplyReadAheadFailureIsAWarningOnThePod(t *testing.T) {
	rec := &podevents.Recorder{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	notMounted := t.TempDir()
	nodevolume.ApplyReadAhead(notMounted, nil, pod, "data", rec, log)
	if ev := rec.Events(); len(ev) != 0 {
		t.Fatalf("events without read_ahead_kb: %+v", ev)
	}
	kb := 4096
	nodevolume.ApplyReadAhead(notMounted, &kb, pod, "data", rec, log)
	ev := rec.Events()
	if len(ev) != 1 || ev[0].Pod != pod || !ev[0].Warning || ev[0].Reason != contract.EventReadAheadFailed ||
		!strings.HasPrefix(ev[0].Msg, "volume data: read_ahead_kb=4096 not applied: ") {
		t.Fatalf("events = %+v, want one ReadAheadFailed Warning on %+v naming volume data and 4096", ev, pod)
	}
}

// The node's machine type is added unless unknown (gcsfuse looks it up) or the volume set
// its own.
func TestWithMachineType(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		mt    string
		want  []string
	}{
		{[]string{"--implicit-dirs"}, "n2-standard-4", []string{"--implicit-dirs", "--machine-type=n2-standard-4"}},
		{nil, "a3-highgpu-8g", []string{"--machine-type=a3-highgpu-8g"}},
		{[]string{"--implicit-dirs"}, "", []string{"--implicit-dirs"}},
		{nil, "", nil},
		{[]string{"--machine-type=a2", "--implicit-dirs"}, "n2-standard-4", []string{"--machine-type=a2", "--implicit-dirs"}},
	} {
		if got := nodevolume.WithMachineType(tc.flags, tc.mt); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("WithMachineType(%q, %q) = %q, want %q", tc.flags, tc.mt, got, tc.want)
		}
	}
}

// An Event goes to the pod named, with the reason, type and message given; none without a
// sink or for a pod whose name is not known yet.
func TestPodEventTo(t *testing.T) {
	rec := &podevents.Recorder{}
	pod := nodevolume.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}
	nodevolume.PodEventTo(rec, pod, true, "R1", "m1")
	nodevolume.PodEventTo(rec, pod, false, "R2", "m2")
	nodevolume.PodEventTo(rec, nodevolume.PodRef{Namespace: "ns", UID: "uid-2"}, true, "R3", "m3")
	nodevolume.PodEventTo(nil, pod, true, "R4", "m4")
	want := []podevents.Event{{Pod: pod, Warning: true, Reason: "R1", Msg: "m1"}, {Pod: pod, Reason: "R2", Msg: "m2"}}
	if got := rec.Events(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events = %+v, want %+v", got, want)
	}
}

// TestApplyReadAheadSetsEveryValue: the mount's kernel read-ahead becomes what the volume
// asks, 0 (no read-ahead, for random reads) as well as more than the default; nil leaves it.
func TestApplyReadAheadSetsEveryValue(t *testing.T) {
	needs.RootAndFUSE(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	fuse, err := fusemount.Mount(mnt, fusemount.Options{Source: "bkt", UserID: os.Getuid(), GroupID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		fuse.Close() // aborts the connection: nothing serves it
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	})
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mnt))
	if err != nil || len(mounts) != 1 {
		t.Fatalf("the FUSE mount: %v %v", mounts, err)
	}
	bdi := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", mounts[0].Major, mounts[0].Minor)
	readAhead := func() string {
		b, err := os.ReadFile(bdi)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := &podevents.Recorder{}
	for _, kb := range []int{0, 4096} {
		nodevolume.ApplyReadAhead(mnt, &kb, nodevolume.PodRef{Name: "p"}, "data", rec, log)
		if got := readAhead(); got != fmt.Sprint(kb) {
			t.Errorf("read_ahead_kb=%d: the mount's read-ahead is %s", kb, got)
		}
	}
	nodevolume.ApplyReadAhead(mnt, nil, nodevolume.PodRef{Name: "p"}, "data", rec, log)
	if got := readAhead(); got != "4096" {
		t.Errorf("no read_ahead_kb changed the mount's read-ahead from 4096 to %s", got)
	}
	if n := len(rec.Events()); n != 0 {
		t.Errorf("%d Events for read-aheads that were applied: %+v", n, rec.Events())
	}
}
