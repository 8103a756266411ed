// Command images builds the project's container images without Docker: static Go binaries
// cross-compiled for each platform, one reproducible layer each (spec.go lists what every
// image holds), assembled with go-containerregistry. It writes
//
//   - -oci DIR: a standard OCI image layout per image (DIR/<name>), its index holding one
//     manifest per platform (what hack/release-images.sh ships; `crane push DIR/<name> REF`
//     or `skopeo copy oci:DIR/<name>:TAG` take it as is);
//   - -docker DIR: a `docker save` tar per image (DIR/<name>.tar; one platform), what the
//     local cluster's containerd imports (hack/images.sh);
//   - -push: the multi-platform index of each image to $repo/<name>:$tag, with the
//     credentials of ~/.docker/config.json (`crane auth login` writes them).
//
// hack/images.sh and hack/release-images.sh run it; see them for the usual flags.
//
// `images pack -ref REF -rootfs DIR -out TAR -config JSON` packs a directory as it is into
// a one-layer image with that runtime config, as a `docker save` tar tagged REF, through
// the same reproducible layer writer (pack.go): hack/conformance-images.sh packs the
// storage suite's test images (busybox, agnhost) so.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const (
	// runTimeout bounds a whole run: cross-compiling every binary cold takes minutes on 2
	// cores; pushing is bounded by it too.
	runTimeout = 45 * time.Minute
	// Annotations of each index in its OCI layout: the tag (what skopeo's oci:DIR:TAG
	// matches) and the full reference (what `ctr import` names the image after).
	annotationRefName    = "org.opencontainers.image.ref.name"
	annotationContainerd = "io.containerd.image.name"
)

// options is one run's configuration, from the flags.
type options struct {
	repoRoot  string
	repo, tag string
	arches    []string          // GOARCH of each platform (linux only)
	names     []string          // images to build
	gcsfuse   map[string]string // GOARCH -> the pinned gcsfuse built for it
	caBundle  string
	ociDir    string
	dockerDir string
	push      bool
	insecure  bool
	// uncompressed: layers as plain tars (local images, read once by the local containerd:
	// no gzip time); release images are gzipped, for smaller pulls.
	uncompressed bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pack" {
		err := runPack(os.Args[2:])
		if err == flag.ErrHelp {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	var platforms, names, gcsfuse string
	flag.StringVar(&o.repoRoot, "repo-root", ".", "the repository's root (where go.mod is)")
	flag.StringVar(&o.repo, "repo", "gcsfuse-csi.local", "registry and repository prefix: images are REPO/<name>:TAG")
	flag.StringVar(&o.tag, "tag", "e2e", "image tag (also the node plugin's reported version)")
	flag.StringVar(&platforms, "platforms", "linux/amd64", "comma-separated platforms (linux/amd64, linux/arm64)")
	flag.StringVar(&names, "images", "release", `comma-separated images, "release" (node, sidecar, webhook, controller) or "all"`)
	flag.StringVar(&gcsfuse, "gcsfuse", "", "comma-separated ARCH=PATH of the pinned gcsfuse for each platform (for the sidecar)")
	flag.StringVar(&o.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle every image carries")
	flag.StringVar(&o.ociDir, "oci", "", "write an OCI image layout per image under this directory")
	flag.StringVar(&o.dockerDir, "docker", "", "write a `docker save` tar per image under this directory (one platform only)")
	flag.BoolVar(&o.push, "push", false, "push each image's multi-platform index to REPO/<name>:TAG")
	flag.BoolVar(&o.insecure, "insecure", false, "talk plain HTTP to the registry (loopback and private addresses do anyway)")
	flag.BoolVar(&o.uncompressed, "uncompressed", false, "layers as plain tars, not gzipped")
	flag.Parse()

	var err error
	if o.arches, err = parsePlatforms(platforms); err == nil {
		if o.names, err = parseNames(names); err == nil {
			o.gcsfuse, err = parseGcsfuse(gcsfuse)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelRun := context.WithTimeout(ctx, runTimeout)
	defer cancelRun()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func parsePlatforms(s string) ([]string, error) {
	var arches []string
	for p := range strings.SplitSeq(s, ",") {
		arch, ok := strings.CutPrefix(strings.TrimSpace(p), "linux/")
		if !ok || (arch != "amd64" && arch != "arm64") {
			return nil, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", p)
		}
		if !slices.Contains(arches, arch) {
			arches = append(arches, arch)
		}
	}
	return arches, nil
}

func parseNames(s string) ([]string, error) {
	var names []string
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		for _, spec := range images {
			if n == "all" || (n == "release" && spec.release) || n == spec.name {
				names = append(names, spec.name)
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no image %q", n)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func parseGcsfuse(s string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" {
		return m, nil
	}
	for kv := range strings.SplitSeq(s, ",") {
		arch, p, ok := strings.Cut(kv, "=")
		if !ok || p == "" {
			return nil, fmt.Errorf("-gcsfuse %q: want ARCH=PATH", kv)
		}
		m[arch] = p
	}
	return m, nil
}

func specByName(n string) imageSpec {
	for _, s := range images {
		if s.name == n {
			return s
		}
	}
	panic("no image spec " + n)
}

// run builds the binaries, packs the images and writes or pushes them.
func run(ctx context.Context, o options) error {
	if o.dockerDir != "" && len(o.arches) != 1 {
		return fmt.Errorf("-docker writes one platform; got %d", len(o.arches))
	}
	ca, err := os.ReadFile(o.caBundle)
	if err != nil || len(ca) == 0 {
		return fmt.Errorf("CA bundle %s (Debian's ca-certificates; hack/install-deps.sh installs it): %v", o.caBundle, err)
	}
	var specs []imageSpec
	var pkgs []string
	for _, n := range o.names {
		s := specByName(n)
		specs = append(specs, s)
		if !slices.Contains(pkgs, s.pkg) {
			pkgs = append(pkgs, s.pkg)
		}
	}
	work, err := os.MkdirTemp("", "gcsfuse-csi-images-")
	if err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	defer os.RemoveAll(work)

	built := map[string]map[string]v1.Image{} // name -> arch -> image
	for _, arch := range o.arches {
		start := time.Now()
		bins := filepath.Join(work, arch)
		if err := goBuild(ctx, o.repoRoot, bins, arch, o.tag, pkgs); err != nil {
			return err
		}
		fmt.Printf("go build linux/%s: %d binaries in %.1f s\n", arch, len(pkgs), time.Since(start).Seconds())
		for _, s := range specs {
			img, err := buildImage(s, arch, bins, o.gcsfuse[arch], ca, o.uncompressed)
			if err != nil {
				return err
			}
			if built[s.name] == nil {
				built[s.name] = map[string]v1.Image{}
			}
			built[s.name][arch] = img
		}
	}

	for _, dir := range []string{o.dockerDir, o.ociDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("output directory: %w", err)
		}
	}
	for _, s := range specs {
		ref, err := name.NewTag(o.repo+"/"+s.name+":"+o.tag, nameOpts(o)...)
		if err != nil {
			return fmt.Errorf("image reference %s/%s:%s: %w", o.repo, s.name, o.tag, err)
		}
		idx := platformIndex(built[s.name])
		if o.dockerDir != "" {
			out := filepath.Join(o.dockerDir, s.name+".tar")
			if err := writeDockerTar(out, ref, built[s.name][o.arches[0]]); err != nil {
				return err
			}
		}
		if o.ociDir != "" {
			dir := filepath.Join(o.ociDir, s.name)
			if err := writeLayout(dir, ref, idx); err != nil {
				return err
			}
		}
		if o.push {
			start := time.Now()
			if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
				return fmt.Errorf("push %s: %w", ref, err)
			}
			fmt.Printf("pushed %s in %.1f s\n", ref, time.Since(start).Seconds())
		}
		if err := describe(ref, idx); err != nil {
			return err
		}
	}
	return nil
}

func nameOpts(o options) []name.Option {
	if o.insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}

// buildImage packs one image for one architecture from the binaries in bins.
func buildImage(s imageSpec, arch, bins, gcsfuse string, ca []byte, uncompressed bool) (v1.Image, error) {
	bin, err := os.ReadFile(filepath.Join(bins, s.bin))
	if err != nil {
		return nil, fmt.Errorf("binary of %s: %w", s.name, err)
	}
	files := []layerFile{{path: s.bin, mode: 0o755, data: bin}}
	if s.gcsfuse {
		if gcsfuse == "" {
			return nil, fmt.Errorf("image %s for linux/%s needs gcsfuse: pass -gcsfuse %s=PATH (hack/install-deps.sh builds it)", s.name, arch, arch)
		}
		g, err := os.ReadFile(gcsfuse)
		if err != nil {
			return nil, fmt.Errorf("gcsfuse for linux/%s: %w", arch, err)
		}
		files = append(files, layerFile{path: "gcsfuse", mode: 0o755, data: g})
	}
	layerTar, err := rootfsLayer(ca, files)
	if err != nil {
		return nil, fmt.Errorf("layer of %s: %w", s.name, err)
	}
	return ociImage(s, arch, layerTar, uncompressed)
}

// writeLayout writes idx as a fresh OCI image layout in dir.
func writeLayout(dir string, ref name.Tag, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationRefName:    ref.TagStr(),
		annotationContainerd: ref.Name(),
	}))
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return nil
}

// describe prints an image's reference, index digest and per-platform manifests.
func describe(ref name.Tag, idx v1.ImageIndex) error {
	d, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("digest of %s: %w", ref, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("index of %s: %w", ref, err)
	}
	var plats []string
	for _, desc := range m.Manifests {
		plats = append(plats, fmt.Sprintf("%s/%s %s", desc.Platform.OS, desc.Platform.Architecture, desc.Digest.String()[:19]))
	}
	fmt.Printf("%s@%s [%s]\n", ref.Name(), d, strings.Join(plats, ", "))
	return nil
}
