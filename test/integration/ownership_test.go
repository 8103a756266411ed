package integration

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/moby/sys/mountinfo"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// airflowUID is the uid Airflow's image runs as (gid 0); its pods set fsGroup to it.
const airflowUID = 50000

// A pod whose app runs as a non-root uid with an fsGroup (Airflow's image) writes through
// the mount with no mount option: the kubelet's volume_mount_group makes the files the
// fsGroup's and group-writable. Without it the same writer is refused, as on a driver that
// ignores fsGroup.
func TestFsGroupMountIsWritableByThePodUser(t *testing.T) {
	for _, tt := range []struct {
		name       string
		mountGroup string
		wantWrite  bool
	}{
		{"fsGroup", "50000", true},
		{"no fsGroup", "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bucket := "bkt-" + strings.ToLower(strings.ReplaceAll(tt.name, " ", "-"))
			e := newEnv(t, bucket)
			_, _, target := mountedWith(t, e, contract.ModeLegacy, bucket, func(req *csi.NodePublishVolumeRequest) {
				req.VolumeCapability.GetMount().VolumeMountGroup = tt.mountGroup
			})
			out, err := runAs(t, target, airflowUID, 0, []uint32{airflowUID},
				`mkdir /proc/self/fd/3/logs && echo task-done > /proc/self/fd/3/logs/task.log && stat -c '%g %a' /proc/self/fd/3/logs/task.log`)
			if !tt.wantWrite {
				if err == nil || !strings.Contains(out, "Permission denied") {
					t.Fatalf("uid %d wrote without fsGroup (err %v): %s", airflowUID, err, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("uid %d gid 0 with fsGroup %s cannot write: %v: %s", airflowUID, tt.mountGroup, err, out)
			}
			if got := strings.TrimSpace(out); got != "50000 664" {
				t.Fatalf("file group and mode %q, want \"50000 664\"", got)
			}
			requireObject(t, bucket, "logs/task.log", []byte("task-done\n"))
		})
	}
}

// runAs runs script in sh as uid:gid with groups, with the directory dir as fd 3: the
// test's temporary directories are root's, so the child reaches the mount through the
// descriptor (/proc/self/fd/3), not through its path.
func runAs(t *testing.T, dir string, uid, gid uint32, groups []uint32, script string) (string, error) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cmd := exec.CommandContext(ctx(t), "sh", "-c", script)
	cmd.ExtraFiles = []*os.File{d}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// read_ahead_kb (the GKE driver's mount option) sets the kernel read-ahead of the mount's
// backing device; without it the kernel's default stays.
func TestReadAheadOption(t *testing.T) {
	const bucket = "bkt-readahead"
	e := newEnv(t, bucket)
	_, _, target := mountedWith(t, e, contract.ModeLegacy, bucket, func(req *csi.NodePublishVolumeRequest) {
		req.VolumeContext[contract.AttrMountOptions] = "implicit-dirs,read_ahead_kb=4096"
	})
	// Applied once gcsfuse has answered the kernel (its status reaches the node plugin
	// a moment after the mount serves).
	got := readAheadOf(t, target)
	for deadline := time.Now().Add(5 * time.Second); got != "4096" && time.Now().Before(deadline); got = readAheadOf(t, target) {
		time.Sleep(20 * time.Millisecond)
	}
	if got != "4096" {
		t.Fatalf("read_ahead_kb of the mount = %s, want 4096", got)
	}
	_, _, plain := mountedWith(t, e, contract.ModeLegacy, bucket, nil)
	if got := readAheadOf(t, plain); got == "4096" {
		t.Fatal("a mount without the option got its read-ahead")
	}
}

// readAheadOf reads the read-ahead of the mount at target from its backing device.
func readAheadOf(t *testing.T, target string) string {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil || len(mounts) == 0 {
		t.Fatalf("mountinfo of %s: %v (%d entries)", target, err, len(mounts))
	}
	m := mounts[len(mounts)-1]
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", m.Major, m.Minor))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// The kernel mount flags a volume asks for are the mount's, each its own: noexec alone
// makes the mount noexec and leaves its atime policy alone; noatime alone the other way.
func TestKernelMountFlags(t *testing.T) {
	const bucket = "bkt-flags"
	e := newEnv(t, bucket)
	for _, tc := range []struct {
		option, want, not string
	}{{"noexec", "noexec", "noatime"}, {"noatime", "noatime", "noexec"}} {
		_, _, target := mountedWith(t, e, contract.ModeLegacy, bucket, func(req *csi.NodePublishVolumeRequest) {
			req.VolumeContext[contract.AttrMountOptions] = "implicit-dirs," + tc.option
		})
		mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
		if err != nil || len(mounts) == 0 {
			t.Fatalf("mountinfo of %s: %v (%d entries)", target, err, len(mounts))
		}
		opts := strings.Split(mounts[len(mounts)-1].Options, ",")
		if !slices.Contains(opts, tc.want) || slices.Contains(opts, tc.not) {
			t.Errorf("%s: the mount's options are %v, want %s and not %s", tc.option, opts, tc.want, tc.not)
		}
	}
}
