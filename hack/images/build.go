package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// goBuild builds the binaries of pkgs for linux/arch into dir, static, with the images'
// flags (buildFlags). Go's build cache keeps an unchanged rebuild to a few seconds. The
// product's binaries are built from the product module alone (GOWORK=off, as a user's
// build or the Dockerfiles build them); the tests' (under ./test/) in the workspace.
func goBuild(ctx context.Context, repoRoot, dir, arch, tag string, pkgs []string) error {
	var product, tests []string
	for _, p := range pkgs {
		if strings.HasPrefix(p, "./test/") {
			tests = append(tests, p)
		} else {
			product = append(product, p)
		}
	}
	for _, b := range []struct {
		gowork string
		pkgs   []string
	}{{"off", product}, {"", tests}} {
		if len(b.pkgs) == 0 {
			continue
		}
		args := append([]string{"build"}, buildFlags(tag)...)
		args = append(args, "-o", dir+string(filepath.Separator))
		args = append(args, b.pkgs...)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "GOWORK="+b.gowork, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %v for linux/%s: %w", b.pkgs, arch, err)
		}
	}
	return nil
}

// layerFile is one regular file of an image's only layer.
type layerFile struct {
	path string // inside the image, without the leading slash
	mode int64
	data []byte
}

// rootfsLayer packs an image's file system into a tar: the shared root (passwd, group,
// /tmp, CA bundle) and the given files, with writeLayer.
func rootfsLayer(caBundle []byte, files []layerFile) ([]byte, error) {
	files = append([]layerFile{
		{path: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "etc/group", mode: 0o644, data: []byte(group)},
		{path: caBundlePath, mode: 0o644, data: caBundle},
	}, files...)
	dirs := map[string]int64{"tmp": 0o1777}
	for _, f := range files {
		for d := path.Dir(f.path); d != "."; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	var entries []layerEntry
	for d, mode := range dirs {
		entries = append(entries, layerEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}})
	}
	for _, f := range files {
		entries = append(entries, layerEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(f.data))}, data: f.data})
	}
	return writeLayer(entries)
}

// layerEntry is one entry of an image's only layer: a directory (its name ends in a
// slash), a symbolic or hard link, or a regular file whose contents are data, or the file
// at src when src is set.
type layerEntry struct {
	hdr  tar.Header
	data []byte
	src  string
}

// sortEntries sorts entries by name: a directory comes before what it holds.
func sortEntries(entries []layerEntry) {
	slices.SortFunc(entries, func(a, b layerEntry) int { return strings.Compare(a.hdr.Name, b.hdr.Name) })
}

// writeLayer packs entries into a layer tar, the one way every image's layer is written
// (rootfsLayer for the project's images, dirLayer for a directory packed as it is). It is
// reproducible: entries sorted by name, owner 0 without names, mtime 0, only the header
// fields given (type, name, mode, size, link target), so an unchanged file system keeps its
// digest and pushing it again uploads nothing.
func writeLayer(entries []layerEntry) ([]byte, error) {
	sortEntries(entries)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := tar.Header{
			Typeflag: e.hdr.Typeflag,
			Name:     e.hdr.Name,
			Linkname: e.hdr.Linkname,
			Mode:     e.hdr.Mode,
			Size:     e.hdr.Size,
			ModTime:  time.Unix(0, 0),
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", hdr.Name, err)
		}
		if err := writeEntryData(tw, e); err != nil {
			return nil, fmt.Errorf("tar %s: %w", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return buf.Bytes(), nil
}

// writeEntryData writes an entry's contents: its data, or hdr.Size bytes of the file at src
// (a file whose size changed since is an error, not a short or long entry).
func writeEntryData(w io.Writer, e layerEntry) error {
	if e.src == "" {
		_, err := w.Write(e.data)
		return err
	}
	f, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	if err != nil {
		return err
	}
	if n != e.hdr.Size {
		return fmt.Errorf("%s: %d bytes, %d when listed", e.src, n, e.hdr.Size)
	}
	return nil
}

// ociImage makes the single-platform OCI image of one spec from its layer (newImage).
func ociImage(s imageSpec, arch string, layerTar []byte, uncompressed bool) (v1.Image, error) {
	img, err := newImage(arch, s.config(), layerTar, uncompressed)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.name, err)
	}
	return img, nil
}

// newImage makes a single-platform linux OCI image of one layer with the given config, the
// layer gzipped, or a plain tar when uncompressed (no gzip time; for the local cluster, read
// once from disk).
func newImage(arch string, config v1.Config, layerTar []byte, uncompressed bool) (v1.Image, error) {
	layer := static.NewLayer(layerTar, types.OCIUncompressedLayer)
	if !uncompressed {
		var err error
		layer, err = tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(layerTar)), nil
		}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("layer: %w", err)
		}
	}
	cfg := &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Config:       config,
		RootFS:       v1.RootFS{Type: "layers"},
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return img, nil
}

// writeDockerTar writes img as a `docker save` tar tagged ref at out (through out.tmp, so a
// failed run leaves no partial tar under the name): what `ctr images import` takes.
func writeDockerTar(out string, ref name.Reference, img v1.Image) error {
	if err := tarball.MultiRefWriteToFile(out+".tmp", map[name.Reference]v1.Image{ref: img}); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// platformIndex is the multi-platform index of one image: one manifest per architecture.
func platformIndex(imgs map[string]v1.Image) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range slices.Sorted(maps.Keys(imgs)) {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        imgs[arch],
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	return idx
}
