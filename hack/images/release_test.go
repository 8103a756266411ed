package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/imagefs"
)

// releaseTimeout bounds the release command in the test: cross-compiling the binaries for
// arm64 cold takes ~5 min on 2 shared cores, more at nice 19 beside an e2e run (hack/checks.sh),
// and the pinned gcsfuse for arm64 when it is not built yet (hack/checks.sh builds it first)
// ~1-6 min more; warm, the whole run takes seconds.
const releaseTimeout = 25 * time.Minute

// releaseWaitDelay is how long the test waits for the command's output after the timeout
// killed its process group.
const releaseWaitDelay = 10 * time.Second

// releaseWant is what a user of each release image relies on, written out here rather than
// read from spec.go, so that a change of user or entrypoint there fails this test.
var releaseWant = map[string]struct {
	user       string
	entrypoint []string
	gcsfuse    bool
}{
	"node":       {"0", []string{"/gcsfuse-csi-node"}, false},
	"sidecar":    {"65534", []string{"/gcsfuse-sidecar"}, true},
	"webhook":    {"65534", []string{"/gcsfuse-webhook"}, false},
	"controller": {"65534", []string{"/gcsfuse-csi-controller"}, false},
}

// elfMachine is the ELF machine of each release architecture.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestReleasePush runs the documented release command, `IMAGE_REPO=... IMAGE_TAG=...
// hack/release-images.sh --push`, against a registry on loopback (go-containerregistry's
// pkg/registry, 127.0.0.1), pulls every release image back and checks what a cluster would
// run: an OCI index with linux/amd64 and linux/arm64, each manifest's config with the
// image's entrypoint and user (the sidecar 65534), and binaries (and the sidecar's gcsfuse)
// that are ELF files of that architecture, besides the CA bundle and passwd. The OCI layout
// the command wrote holds the same index. Needs the pinned gcsfuse built for both
// architectures (hack/install-deps.sh with GCSFUSE_ARCHES="amd64 arm64", which hack/checks.sh
// runs first); skipped without it unless GCSFUSE_CSI_REQUIRE_INTEGRATION=1 (hack/checks.sh).
func TestReleasePush(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds images for two architectures")
	}
	root := repoRoot(t)
	cache := os.Getenv("GCSFUSE_CSI_CACHE")
	if cache == "" {
		cache = "/var/cache/gcsfuse-csi"
	}
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	for _, g := range []string{filepath.Join(cache, "bin/gcsfuse"), filepath.Join(cache, "bin/linux_"+other, "gcsfuse")} {
		if _, err := os.Stat(g); err != nil && os.Getenv("GCSFUSE_CSI_REQUIRE_INTEGRATION") != "1" {
			t.Skipf("no %s (GCSFUSE_ARCHES=\"amd64 arm64\" hack/install-deps.sh builds it)", g)
		}
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/team/gcsfuse-csi"
	if !strings.HasPrefix(repo, "127.0.0.1:") {
		t.Fatalf("registry at %s: want loopback", srv.URL)
	}
	const tag = "v0.0.0-release-test"
	out := t.TempDir()

	// A TERM or an interrupt to the test (hack/test.sh stopping its background checks when a
	// step before them failed) ends the script's group as the timeout does: it runs in a
	// group of its own, which the signal to the test's group does not reach, and a CI run that
	// failed had left it building for minutes after.
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(sig, releaseTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "hack/release-images.sh", "--push")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IMAGE_REPO="+repo, "IMAGE_TAG="+tag, "RELEASE_DIR="+out)
	// At the timeout the whole process group goes, the builds under the script included (they
	// would hold its output, and the heavy-build lock hack/checks.sh runs this under, open).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = releaseWaitDelay
	start := time.Now()
	output, err := cmd.CombinedOutput()
	t.Logf("hack/release-images.sh --push (%.1f s):\n%s", time.Since(start).Seconds(), output)
	if sig.Err() != nil {
		t.Fatal("interrupted: the script's builds were stopped")
	}
	if err != nil {
		t.Fatalf("hack/release-images.sh --push: %v", err)
	}

	for img, want := range releaseWant {
		t.Run(img, func(t *testing.T) {
			ref, err := name.NewTag(repo + "/" + img + ":" + tag)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := remote.Index(ref, remote.WithContext(ctx))
			if err != nil {
				t.Fatalf("pull %s: %v", ref, err)
			}
			m, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if m.MediaType != types.OCIImageIndex {
				t.Errorf("%s: media type %s; want %s", ref, m.MediaType, types.OCIImageIndex)
			}
			var arches []string
			for _, d := range m.Manifests {
				if d.Platform == nil || d.Platform.OS != "linux" {
					t.Fatalf("%s: manifest %s for platform %+v", ref, d.Digest, d.Platform)
				}
				arch := d.Platform.Architecture
				arches = append(arches, arch)
				checkPlatformImage(t, idx, d, arch, want.user, want.entrypoint, want.gcsfuse)
			}
			slices.Sort(arches)
			if !slices.Equal(arches, []string{"amd64", "arm64"}) {
				t.Errorf("%s: platforms %v; want amd64 and arm64", ref, arches)
			}

			// The OCI layout on disk holds the very index that was pushed, named for the tag.
			lp, err := layout.FromPath(filepath.Join(out, img))
			if err != nil {
				t.Fatalf("OCI layout: %v", err)
			}
			top, err := lp.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			tm, err := top.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			pushed, _ := idx.Digest()
			if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != pushed || tm.Manifests[0].Annotations[annotationRefName] != tag {
				t.Errorf("OCI layout %s/index.json: %+v; want one index %s named %s", img, tm.Manifests, pushed, tag)
			}
		})
	}
}

// checkPlatformImage checks one platform's image of an index: its config and its files.
func checkPlatformImage(t *testing.T, idx v1.ImageIndex, d v1.Descriptor, arch, user string, entrypoint []string, gcsfuse bool) {
	t.Helper()
	im, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatalf("%s: %v", arch, err)
	}
	cfg, err := im.ConfigFile()
	if err != nil {
		t.Fatalf("%s: config: %v", arch, err)
	}
	if cfg.OS != "linux" || cfg.Architecture != arch {
		t.Errorf("%s: config platform %s/%s", arch, cfg.OS, cfg.Architecture)
	}
	if cfg.Config.User != user || !slices.Equal(cfg.Config.Entrypoint, entrypoint) {
		t.Errorf("%s: user %q entrypoint %q; want %q %q", arch, cfg.Config.User, cfg.Config.Entrypoint, user, entrypoint)
	}
	files := imageFiles(t, im)
	bins := []string{strings.TrimPrefix(entrypoint[0], "/")}
	if gcsfuse {
		bins = append(bins, "gcsfuse")
	}
	for _, b := range bins {
		data, ok := files[b]
		if !ok {
			t.Errorf("%s: no /%s in the image", arch, b)
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Errorf("%s: /%s is not an ELF file: %v", arch, b, err)
			continue
		}
		if f.Machine != elfMachine[arch] || f.Class != elf.ELFCLASS64 {
			t.Errorf("%s: /%s is ELF %s %s; want %s", arch, b, f.Class, f.Machine, elfMachine[arch])
		}
	}
	if len(files[caBundlePath]) == 0 {
		t.Errorf("%s: no CA bundle at /%s", arch, caBundlePath)
	}
	if string(files["etc/passwd"]) != passwd {
		t.Errorf("%s: /etc/passwd %q", arch, files["etc/passwd"])
	}
}

// imageFiles reads every regular file of an image's layers.
func imageFiles(t *testing.T, im v1.Image) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := imagefs.Walk(im, func(h *tar.Header, content io.Reader) error {
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		b, err := io.ReadAll(content)
		files[strings.TrimPrefix(h.Name, "./")] = b
		return err
	})
	if err != nil {
		t.Fatalf("image file system: %v", err)
	}
	return files
}
