package sharedmounter

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/podfiles"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/sharedmount"
)

// validConfig is a Config New takes, over a fresh shared directory.
func validConfig(t *testing.T) Config {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "shared")
	files, err := nodevolume.NewFiles(nodevolume.Files{KubeletRoot: "/var/lib/kubelet", MounterDir: MounterDir(dir), UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Dir: dir, MounterTmpPath: "/gcsfuse-tmp", KubeletRoot: "/var/lib/kubelet", UID: os.Getuid(), GID: os.Getgid(),
		UnmountBusyWait: time.Second, Store: nodevolume.NewStore(), Files: files}
}

// New refuses every config it cannot work with, naming what is wrong, and makes nothing
// then.
func TestNewRefusesABadConfig(t *testing.T) {
	for what, tc := range map[string]struct {
		change func(c *Config)
		says   string
	}{
		"relative shared directory":  {func(c *Config) { c.Dir = "shared" }, `"shared"`},
		"relative kubelet root":      {func(c *Config) { c.KubeletRoot = "var/lib/kubelet" }, `"var/lib/kubelet"`},
		"no mounter path":            {func(c *Config) { c.MounterTmpPath = "" }, "mounter's path"},
		"negative uid":               {func(c *Config) { c.UID = -1 }, "-1/"},
		"negative gid":               {func(c *Config) { c.GID = -1 }, "/-1"},
		"no unmount busy wait":       {func(c *Config) { c.UnmountBusyWait = 0 }, "busy wait 0s"},
		"negative unmount busy wait": {func(c *Config) { c.UnmountBusyWait = -time.Second }, "busy wait -1s"},
		"negative linger":            {func(c *Config) { c.Linger = -time.Second }, "linger -1s"},
		"negative offer wait":        {func(c *Config) { c.OfferWait = -time.Second }, "offer wait -1s"},
		"no store":                   {func(c *Config) { c.Store = nil }, "store"},
		"no volume files":            {func(c *Config) { c.Files = nil }, "volume files"},
	} {
		t.Run(what, func(t *testing.T) {
			c := validConfig(t)
			tc.change(&c)
			m, err := New(c)
			if err == nil {
				m.Close()
				t.Fatal("taken")
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q does not say %q", err, tc.says)
			}
			if c.Dir != "shared" {
				if _, err := os.Lstat(c.Dir); !os.IsNotExist(err) {
					t.Errorf("the shared directory made for a refused config: %v", err)
				}
			}
		})
	}
}

// New makes the shared directory and gives the mounter its directory (the kubelet's
// hostPath, made by root and open to all): owned by the mounter's uid and gid, mode 0750,
// with the running lock the mounter waits for. Unset waits get their defaults.
func TestNewGivesTheMounterItsDirectory(t *testing.T) {
	c := validConfig(t)
	if os.Getuid() == 0 { // another user than the test's, and a gid apart from the uid
		c.UID, c.GID = 1234, 5678
	}
	if err := os.MkdirAll(MounterDir(c.Dir), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(MounterDir(c.Dir), 0o777); err != nil { // as the kubelet may leave it
		t.Fatal(err)
	}
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st, err := os.Stat(m.mounterDir())
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if int(sys.Uid) != c.UID || int(sys.Gid) != c.GID || st.Mode().Perm() != 0o750 {
		t.Errorf("the mounter's directory: owner %d:%d mode %o, want %d:%d 0750", sys.Uid, sys.Gid, st.Mode().Perm(), c.UID, c.GID)
	}
	for _, d := range []string{c.Dir, filepath.Join(c.Dir, sharedMountDir)} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() || st.Mode().Perm()&0o007 != 0 {
			t.Errorf("%s: %v %v, want a directory closed to others", d, st, err)
		}
	}
	if st, err := os.Lstat(filepath.Join(m.mounterDir(), podfiles.MounterRunningFile)); err != nil || !st.Mode().IsRegular() {
		t.Errorf("the mounter's running lock: %v %v", st, err)
	}
	if m.cfg.Linger != sharedmount.DefaultLinger || m.cfg.OfferWait != DefaultOfferWait {
		t.Errorf("linger %s, offer wait %s; want the defaults %s, %s", m.cfg.Linger, m.cfg.OfferWait, sharedmount.DefaultLinger, DefaultOfferWait)
	}
	if m.cfg.Metrics == nil || m.cfg.Log == nil || m.table == nil {
		t.Error("New left the status recorder, the log or the table unset")
	}
	c.Linger, c.OfferWait = time.Minute, time.Second
	m2, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if m2.cfg.Linger != time.Minute || m2.cfg.OfferWait != time.Second {
		t.Errorf("linger %s, offer wait %s; want the config's 1m0s, 1s", m2.cfg.Linger, m2.cfg.OfferWait)
	}
}
