package sidecarmounter

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/nodevolume"
)

// newTestMounter is New over cfg, with a fresh store, volume files under a temporary
// kubelet root, a short unmount wait and a silent log where cfg has none.
func newTestMounter(t *testing.T, cfg Config) *Mounter {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = nodevolume.NewStore()
	}
	if cfg.Files == nil {
		f, err := nodevolume.NewFiles(nodevolume.Files{KubeletRoot: t.TempDir(), UID: cfg.UID, GID: cfg.GID})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Files = f
	}
	if cfg.UnmountBusyWait == 0 {
		cfg.UnmountBusyWait = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
