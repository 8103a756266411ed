package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// packRoot writes a small root file system under dir, like hack/conformance-images.sh's:
// a binary, links to it, /etc files, a sticky /tmp, a private key, a setuid file, a hard
// link and an empty directory. Owners and times are what the caller says, to show they do
// not reach the image.
func packRoot(t *testing.T, dir string, uid int, mtime time.Time) {
	t.Helper()
	for _, d := range []string{"bin", "etc", "tmp", "uploads", "usr/share/x"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := []struct {
		path string
		mode os.FileMode
		data string
	}{
		{"bin/busybox", 0o755, "busybox binary"},
		{"etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\n"},
		{"localhost.key", 0o600, "key"},
		{"bin/suid", 0o755 | os.ModeSetuid, "suid"},
		{"usr/share/x/b", 0o644, "linked"},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if err := os.WriteFile(p, []byte(f.data), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky))
	must(os.Symlink("busybox", filepath.Join(dir, "bin/sh")))
	// The hard link's second name sorts first: the file's contents go under it.
	must(os.Link(filepath.Join(dir, "usr/share/x/b"), filepath.Join(dir, "usr/share/x/a")))
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, uid, uid); err != nil {
				return err
			}
		}
		if info.Mode()&os.ModeSymlink == 0 {
			return os.Chtimes(p, mtime, mtime)
		}
		return nil
	})
	must(err)
	must(os.Chmod(filepath.Join(dir, "bin/suid"), 0o755|os.ModeSetuid)) // chown cleared it
}

// layerHeaders reads the headers of an image's only layer.
func layerHeaders(t *testing.T, img v1.Image) []*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v; want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var hdrs []*tar.Header
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
	}
}

// TestPackDirectory: `images pack` packs a directory as it is: every file, directory and
// link with its mode (setuid and sticky bits too) and link target, owned by 0 at time 0,
// in sorted order, a hard link stored once; the config carries the given fields and the
// platform. Two trees with the same contents but other owners and times make the same
// digest; a changed file another one.
func TestPackDirectory(t *testing.T) {
	config := `{"Entrypoint":["/agnhost"],"Cmd":["pause"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"User":"1000","WorkingDir":"/uploads"}`
	pack := func(root string) v1.Image {
		t.Helper()
		img, err := packImage(packOptions{rootfs: root, config: config, arch: "arm64"})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	digest := func(img v1.Image) v1.Hash {
		t.Helper()
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	a, b := t.TempDir(), t.TempDir()
	packRoot(t, a, 1000, time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC))
	packRoot(t, b, 4242, time.Now())
	imgA, imgB := pack(a), pack(b)
	if da, db := digest(imgA), digest(imgB); da != db {
		t.Errorf("same contents, other owners and times: digests %s and %s", da, db)
	}

	cf, err := imgA.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("platform %s/%s, want linux/arm64", cf.OS, cf.Architecture)
	}
	if !slices.Equal(c.Entrypoint, []string{"/agnhost"}) || !slices.Equal(c.Cmd, []string{"pause"}) ||
		!slices.Equal(c.Env, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}) ||
		c.User != "1000" || c.WorkingDir != "/uploads" {
		t.Errorf("config %+v: want the fields of %s", c, config)
	}

	var got []string
	for _, h := range layerHeaders(t, imgA) {
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s: owner %d:%d (%q:%q), mtime %s; want 0:0, no names, the epoch", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		e := fmt.Sprintf("%c %s %04o", h.Typeflag, h.Name, h.Mode)
		switch h.Typeflag {
		case tar.TypeSymlink, tar.TypeLink:
			e += " -> " + h.Linkname
		case tar.TypeReg:
			e += fmt.Sprintf(" %d", h.Size)
		}
		got = append(got, e)
	}
	want := []string{
		"5 bin/ 0755",
		"0 bin/busybox 0755 14",
		"2 bin/sh 0777 -> busybox",
		"0 bin/suid 4755 4",
		"5 etc/ 0755",
		"0 etc/passwd 0644 30",
		"0 localhost.key 0600 3",
		"5 tmp/ 1777",
		"5 uploads/ 0755",
		"5 usr/ 0755",
		"5 usr/share/ 0755",
		"5 usr/share/x/ 0755",
		"0 usr/share/x/a 0644 6",
		"1 usr/share/x/b 0644 -> usr/share/x/a",
	}
	if !slices.Equal(got, want) {
		t.Errorf("layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	if err := os.WriteFile(filepath.Join(b, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/ash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if digest(pack(b)) == digest(imgA) {
		t.Error("a changed file, same digest")
	}
}

// TestPackCommand: the command writes a `docker save` tar tagged with -ref holding the image
// packImage makes, and rejects a config field it does not know and a reference without a tag.
func TestPackCommand(t *testing.T) {
	root := t.TempDir()
	packRoot(t, root, 0, time.Unix(1, 0))
	out := filepath.Join(t.TempDir(), "busybox.tar")
	const ref = "gcsfuse-csi.local/e2e-test-images/busybox:1.37.0-1"
	config := `{"Cmd":["sh"],"Env":["PATH=/bin"]}`
	if err := runPack([]string{"-ref", ref, "-rootfs", root, "-out", out, "-config", config, "-platform", "linux/amd64"}); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, &tag)
	if err != nil {
		t.Fatalf("image %s in %s: %v", ref, out, err)
	}
	want, err := packImage(packOptions{rootfs: root, config: config, arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := img.ConfigName()
	wantCfg, _ := want.ConfigName()
	gotLayers, _ := img.Layers()
	wantLayers, _ := want.Layers()
	gotDiff, _ := gotLayers[0].DiffID()
	wantDiff, _ := wantLayers[0].DiffID()
	if got != wantCfg || gotDiff != wantDiff {
		t.Errorf("tar: config %s, layer %s; want %s, %s", got, gotDiff, wantCfg, wantDiff)
	}
	if _, err := os.Stat(out + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("%s.tmp left behind: %v", out, err)
	}

	for _, args := range [][]string{
		{"-ref", ref, "-rootfs", root, "-out", out, "-config", `{"Command":["sh"]}`},
		{"-ref", ref, "-rootfs", root, "-out", out, "-config", `{"Cmd":["sh"]} {}`},
		{"-ref", "gcsfuse-csi.local/e2e-test-images/busybox", "-rootfs", root, "-out", out},
		{"-ref", ref, "-rootfs", filepath.Join(root, "etc/passwd"), "-out", out},
		{"-ref", ref, "-out", out},
	} {
		if err := runPack(args); err == nil {
			t.Errorf("pack %q: no error", args)
		}
	}
}
