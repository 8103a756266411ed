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
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// goBuild builds the binaries of pkgs for linux/arch into dir, static, with the images'
// flags (buildFlags). Go's build cache keeps an unchanged rebuild to a few seconds.
func goBuild(ctx context.Context, repoRoot, dir, arch, tag string, pkgs []string) error {
	args := append([]string{"build"}, buildFlags(tag)...)
	args = append(args, "-o", dir+string(filepath.Separator))
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for linux/%s: %w", arch, err)
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
// /tmp, CA bundle) and the given files. It is reproducible (sorted entries, owner 0, mtime
// 0), so an unchanged image keeps its digest and pushing it again uploads nothing.
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
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	var entries []entry
	for d, mode := range dirs {
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}})
	}
	for _, f := range files {
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: f.mode, Size: int64(len(f.data))}, data: f.data})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		switch {
		case a.hdr.Name < b.hdr.Name:
			return -1
		case a.hdr.Name > b.hdr.Name:
			return 1
		}
		return 0
	})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.hdr.ModTime = time.Unix(0, 0)
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.hdr.Name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", e.hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return buf.Bytes(), nil
}

// ociImage makes the single-platform OCI image of one spec from its layer, gzipped, or
// a plain tar when uncompressed (no gzip time; for the local cluster, read once from disk).
func ociImage(s imageSpec, arch string, layerTar []byte, uncompressed bool) (v1.Image, error) {
	layer := static.NewLayer(layerTar, types.OCIUncompressedLayer)
	if !uncompressed {
		var err error
		layer, err = tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(layerTar)), nil
		}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("layer of %s: %w", s.name, err)
		}
	}
	cfg := &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Config: v1.Config{
			User:       s.user,
			Entrypoint: s.entrypoint(),
			Env:        []string{pathEnv},
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(base, cfg)
	if err != nil {
		return nil, fmt.Errorf("config of %s: %w", s.name, err)
	}
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", s.name, err)
	}
	return img, nil
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
