// Command release assembles the release artifacts a team can mirror, offline, from the
// images hack/release-images.sh built (an OCI image layout per image, amd64 and arm64):
//
//   - images/<name>-<version>.oci.tar: each image's OCI layout as one tar, what `ctr -n
//     k8s.io images import` takes (it names the image after io.containerd.image.name) and
//     `skopeo copy --all --preserve-digests oci-archive:FILE docker://REF` pushes whole (the
//     digest the chart pins is the index's, of every platform);
//   - sbom/<name>-<version>.cdx.json: a CycloneDX SBOM per image: every Go binary of every
//     platform (ours and gcsfuse), with the modules it was built from, read from the
//     binaries' own build information in the image's layers;
//   - gcsfuse-csi-<version>.tgz: the Helm chart with each image pinned by its index digest;
//   - kubectl-gcsfuse_<os>_<arch>.tar.gz for linux and darwin on amd64 and arm64, and
//     krew/gcsfuse.yaml, the krew plugin manifest naming them by -download-url and sha256;
//   - SHA256SUMS of every file above.
//
// hack/release.sh runs it after hack/release-images.sh; see there.
//
//	go run ./hack/release -version v0.2.0 -repo REGISTRY/gcsfuse-csi -oci DIR -out DIR -download-url URL -source-date-epoch SECONDS
//
// The output is reproducible from the same images and tree: file times are the
// -source-date-epoch (the commit's time), file modes fixed, entries in a fixed order. A run
// that fails leaves no output directory (it builds in DIR.tmp and renames it at the end).
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/gcsfuse-csi/gcsfuse-csi/internal/testing/imagefs"
)

// The release's images, as hack/release-images.sh builds them.
var imageNames = []string{"node", "sidecar", "webhook", "controller"}

// pluginPlatforms are the kubectl-gcsfuse builds a release carries (-plugin-platforms,
// default all of them; CI's install from the artifacts builds its own platform's only).
var pluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// buildTimeout bounds the plugin's cross-builds.
const buildTimeout = 20 * time.Minute

// maxBinary bounds one file read from a layer to find its build information.
const maxBinary = 512 << 20

var versionPattern = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

type options struct {
	version, repo, oci, out, downloadURL, repoRoot, helm string
	platforms, pluginPlatforms                           []string
	sourceDate                                           time.Time
}

func main() {
	var o options
	flag.StringVar(&o.version, "version", "", "the release, vX.Y.Z (the images' tag)")
	flag.StringVar(&o.repo, "repo", "", "the images' repository prefix, REGISTRY/PATH (images are REPO/<name>)")
	flag.StringVar(&o.oci, "oci", "", "the OCI image layouts hack/release-images.sh wrote (DIR/<name>)")
	flag.StringVar(&o.out, "out", "", "where the artifacts go (made; must not exist)")
	flag.StringVar(&o.downloadURL, "download-url", "", "where the plugin's archives will be downloaded from, for the krew manifest (URL/<archive>)")
	flag.StringVar(&o.helm, "helm", os.Getenv("HELM"), "the helm binary (packages the chart)")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "the platforms every image must hold")
	plugins := flag.String("plugin-platforms", strings.Join(pluginPlatforms, ","), "the kubectl-gcsfuse builds, OS/ARCH each, of "+strings.Join(pluginPlatforms, ", "))
	epoch := flag.Int64("source-date-epoch", 0, "the time of every file written, in seconds (the commit's: git log -1 --format=%ct)")
	flag.Parse()
	o.platforms = strings.Split(*platforms, ",")
	o.pluginPlatforms = strings.Split(*plugins, ",")
	o.sourceDate = time.Unix(*epoch, 0).UTC()
	root, err := os.Getwd()
	if err == nil {
		o.repoRoot = root
		err = run(context.Background(), o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case !versionPattern.MatchString(o.version):
		return fmt.Errorf("-version %q: want vX.Y.Z", o.version)
	case o.sourceDate.Unix() <= 0:
		return errors.New("-source-date-epoch: the commit's time, in seconds")
	}
	if _, err := name.NewRepository(o.repo+"/node", name.StrictValidation); err != nil || strings.ToLower(o.repo) != o.repo {
		return fmt.Errorf("-repo %q: want REGISTRY[:PORT]/PATH, lower case (%v)", o.repo, err)
	}
	switch {
	case o.oci == "" || o.out == "" || o.helm == "":
		return errors.New("-oci, -out and -helm (or $HELM) are required")
	case !strings.HasPrefix(o.downloadURL, "https://"):
		return fmt.Errorf("-download-url %q: want an https URL", o.downloadURL)
	}
	for i, p := range o.pluginPlatforms {
		if !slices.Contains(pluginPlatforms, p) || slices.Contains(o.pluginPlatforms[:i], p) {
			return fmt.Errorf("-plugin-platforms: %q is not one of %s, or given twice", p, strings.Join(pluginPlatforms, ", "))
		}
	}
	if _, err := os.Stat(o.out); err == nil {
		return fmt.Errorf("-out %s exists: give a new directory", o.out)
	}
	return nil
}

func run(ctx context.Context, o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	if err := checkChartVersion(o); err != nil {
		return err
	}
	final := o.out
	o.out = final + ".tmp"
	if err := os.RemoveAll(o.out); err != nil {
		return err
	}
	if err := assemble(ctx, o); err != nil {
		os.RemoveAll(o.out)
		return err
	}
	return os.Rename(o.out, final)
}

// checkChartVersion refuses a release whose version is not the chart's (Chart.yaml's
// version and appVersion carry the release's number; a pre-release suffix is allowed).
func checkChartVersion(o options) error {
	raw, err := os.ReadFile(filepath.Join(o.repoRoot, "deploy", "chart", "gcsfuse-csi", "Chart.yaml"))
	if err != nil {
		return err
	}
	m := regexp.MustCompile(`(?m)^version: *"?([0-9]+\.[0-9]+\.[0-9]+)(-[0-9A-Za-z.-]+)?"?[ \t]*$`).FindSubmatch(raw)
	if m == nil {
		return fmt.Errorf("the chart's Chart.yaml has no version: X.Y.Z[-suffix] line")
	}
	base, _, _ := strings.Cut(strings.TrimPrefix(o.version, "v"), "-")
	if string(m[1]) != base {
		return fmt.Errorf("-version %s: the chart (Chart.yaml) is version %s; bump it first", o.version, m[1])
	}
	return nil
}

// assemble writes every artifact into o.out.
func assemble(ctx context.Context, o options) error {
	for _, d := range []string{"images", "sbom", "krew"} {
		if err := os.MkdirAll(filepath.Join(o.out, d), 0o755); err != nil {
			return err
		}
	}
	digests := map[string]string{}
	for _, name := range imageNames {
		dir := filepath.Join(o.oci, name)
		digest, sbom, err := describeImage(dir, name, o.version, o.platforms)
		if err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		digests[name] = digest
		if err := writeFile(filepath.Join(o.out, "sbom", name+"-"+o.version+".cdx.json"), sbom); err != nil {
			return err
		}
		if err := tarDir(dir, filepath.Join(o.out, "images", name+"-"+o.version+".oci.tar"), o.sourceDate); err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		fmt.Printf("image %s/%s:%s@%s\n", o.repo, name, o.version, digest)
	}
	if err := packageChart(ctx, o, digests); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := buildPlugin(ctx, o); err != nil {
		return fmt.Errorf("kubectl-gcsfuse: %w", err)
	}
	if err := writeChecksums(o.out); err != nil {
		return err
	}
	return setTimes(o.out, o.sourceDate)
}

// setTimes sets every file's time under dir to t.
func setTimes(dir string, t time.Time) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, t, t)
	})
}

// describeImage reads the OCI layout of one image: its index digest (what the chart pins)
// and its SBOM.
func describeImage(dir, name, version string, platforms []string) (string, []byte, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", nil, err
	}
	outer, err := p.ImageIndex()
	if err != nil {
		return "", nil, err
	}
	im, err := outer.IndexManifest()
	if err != nil {
		return "", nil, err
	}
	if len(im.Manifests) != 1 {
		return "", nil, fmt.Errorf("%s holds %d indexes, want the one hack/images wrote", dir, len(im.Manifests))
	}
	idx, err := outer.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		return "", nil, err
	}
	inner, err := idx.IndexManifest()
	if err != nil {
		return "", nil, err
	}
	var have []string
	for _, m := range inner.Manifests {
		if m.Platform != nil {
			have = append(have, m.Platform.String())
		}
	}
	for _, p := range platforms {
		if !slices.Contains(have, p) {
			return "", nil, fmt.Errorf("%s has the platforms %v, not %s", dir, have, p)
		}
	}
	sbom, err := imageSBOM(idx, name, version, im.Manifests[0].Digest.String())
	return im.Manifests[0].Digest.String(), sbom, err
}

// imageSBOM is a CycloneDX BOM of the image index: a component per Go binary per platform,
// with the modules of its build information.
func imageSBOM(idx v1.ImageIndex, name, version, digest string) ([]byte, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var comps []cdx.Component
	for _, m := range im.Manifests {
		if m.Platform == nil {
			return nil, fmt.Errorf("manifest %s names no platform", m.Digest)
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			return nil, err
		}
		bins, err := goBinaries(img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Platform, err)
		}
		if len(bins) == 0 {
			return nil, fmt.Errorf("%s: no Go binary in the image", m.Platform)
		}
		for _, b := range bins {
			comps = append(comps, binaryComponent(b, m.Platform.String()))
		}
	}
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Component: &cdx.Component{Type: cdx.ComponentTypeContainer, Name: "gcsfuse-csi/" + name, Version: version,
			BOMRef: "image:" + name, Properties: &[]cdx.Property{{Name: "oci:index-digest", Value: digest}}},
	}
	bom.Components = &comps
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// goBinary is one Go executable of an image.
type goBinary struct {
	path string
	info *buildinfo.BuildInfo
	sum  string // sha256 of the file
}

// goBinaries finds the Go executables of img's file system (its layers flattened, as the
// container sees them).
func goBinaries(img v1.Image) ([]goBinary, error) {
	var out []goBinary
	err := imagefs.Walk(img, func(h *tar.Header, content io.Reader) error {
		if h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
			return nil
		}
		if h.Size > maxBinary {
			return fmt.Errorf("%s: %d bytes, more than the %d an SBOM reads", h.Name, h.Size, maxBinary)
		}
		data, err := io.ReadAll(content)
		if err != nil {
			return err
		}
		info, err := buildinfo.Read(bytes.NewReader(data))
		if err != nil {
			return nil // not a Go binary
		}
		sum := sha256.Sum256(data)
		out = append(out, goBinary{path: path.Clean("/" + h.Name), info: info, sum: hex.EncodeToString(sum[:])})
		return nil
	})
	slices.SortFunc(out, func(a, b goBinary) int { return strings.Compare(a.path, b.path) })
	return out, err
}

// binaryComponent is a binary as a CycloneDX application, its modules as its components.
func binaryComponent(b goBinary, platform string) cdx.Component {
	mainVersion := b.info.Main.Version
	c := cdx.Component{
		Type: cdx.ComponentTypeApplication, Name: b.path, Version: mainVersion,
		BOMRef:     platform + ":" + b.path,
		PackageURL: purl(b.info.Main.Path, mainVersion),
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: b.sum}},
		Properties: &[]cdx.Property{{Name: "platform", Value: platform}, {Name: "go:toolchain", Value: b.info.GoVersion},
			{Name: "go:main", Value: b.info.Main.Path}},
	}
	var mods []cdx.Component
	for _, d := range b.info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		mods = append(mods, cdx.Component{Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version,
			BOMRef: platform + ":" + b.path + ":" + m.Path, PackageURL: purl(m.Path, m.Version)})
	}
	if len(mods) > 0 {
		c.Components = &mods
	}
	return c
}

// purl is a Go module's package URL (the purl spec's golang type: each path segment and the
// version percent-encoded), "" for a module without one (a local replacement).
func purl(module, version string) string {
	if module == "" || strings.HasPrefix(module, ".") || strings.HasPrefix(module, "/") {
		return ""
	}
	segs := strings.Split(module, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	p := "pkg:golang/" + strings.Join(segs, "/")
	if version != "" && version != "(devel)" {
		p += "@" + strings.ReplaceAll(url.PathEscape(version), "+", "%2B")
	}
	return p
}

// tarDir writes dir's files, relative to it and in a fixed order, as a tar at out, with
// fixed modes (0644, directories 0755) and times (at); a link in dir is an error.
func tarDir(dir, out string, at time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		if !d.IsDir() && !info.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname, h.Mode = filepath.ToSlash(rel), at, 0, 0, "", "", 0o644
		h.AccessTime, h.ChangeTime, h.Format = time.Time{}, time.Time{}, tar.FormatPAX
		if d.IsDir() {
			h.Name += "/"
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	return errors.Join(err, tw.Close(), f.Close())
}

// imagesSection matches values.yaml's top-level images: block, to the next top-level key.
var imagesSection = regexp.MustCompile(`(?m)^images:[ \t]*(?:#.*)?\n(?:(?:[ \t#].*|)\n)*`)

// imageBlock matches one image of values.yaml's images: its name line through its digest.
var imageBlock = regexp.MustCompile(`(?m)^  (node|webhook|controller|sidecar):\n((?:    .*\n|\s*#.*\n)*?)    repository: .*\n    tag: .*\n    digest: .*\n`)

// pinValues rewrites values.yaml's images to repo/<name>:version@digest, keeping every
// comment; an image it cannot find is an error (the chart changed shape).
// Only the top-level images: block is rewritten (a node: elsewhere, say a future
// mounter.node, is left alone), and each image must be in it once.
func pinValues(values []byte, repo, version string, digests map[string]string) ([]byte, error) {
	values = bytes.ReplaceAll(values, []byte("\r\n"), []byte("\n"))
	if !bytes.HasSuffix(values, []byte("\n")) {
		values = append(values, '\n')
	}
	loc := imagesSection.FindIndex(values)
	if loc == nil {
		return nil, errors.New("values.yaml: no top-level images: block")
	}
	seen := map[string]int{}
	block := imageBlock.ReplaceAllFunc(values[loc[0]:loc[1]], func(m []byte) []byte {
		sub := imageBlock.FindSubmatch(m)
		name := string(sub[1])
		seen[name]++
		return fmt.Appendf(nil, "  %s:\n%s    repository: %s/%s\n    tag: %s\n    digest: %q\n", name, sub[2], repo, name, version, digests[name])
	})
	for _, name := range imageNames {
		switch {
		case digests[name] == "":
			return nil, fmt.Errorf("image %s: no digest to pin", name)
		case seen[name] != 1:
			return nil, fmt.Errorf("values.yaml: images.%s found %d times in the images: block, want once with repository, tag and digest lines", name, seen[name])
		}
	}
	return slices.Concat(values[:loc[0]], block, values[loc[1]:]), nil
}

// packageChart copies the chart, pins its images and version, and packages it with helm.
func packageChart(ctx context.Context, o options, digests map[string]string) error {
	src := filepath.Join(o.repoRoot, "deploy", "chart", "gcsfuse-csi")
	tmp, err := os.MkdirTemp("", "gcsfuse-csi-chart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dst := filepath.Join(tmp, "gcsfuse-csi")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return err
	}
	values, err := os.ReadFile(filepath.Join(dst, "values.yaml"))
	if err != nil {
		return err
	}
	if values, err = pinValues(values, o.repo, o.version, digests); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dst, "values.yaml"), values, 0o644); err != nil {
		return err
	}
	// helm writes each file's time into the archive: the commit's, so that the same tree
	// packages to the same bytes.
	if err := setTimes(dst, o.sourceDate); err != nil {
		return err
	}
	v := strings.TrimPrefix(o.version, "v")
	cmd := exec.CommandContext(ctx, o.helm, "package", dst, "--version", v, "--app-version", v, "-d", o.out)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm package: %v\n%s", err, out)
	}
	// The packaged chart renders with its pinned values (its schema checks them).
	tgz := filepath.Join(o.out, "gcsfuse-csi-"+v+".tgz")
	if out, err := exec.CommandContext(ctx, o.helm, "template", "gcsfuse-csi", tgz, "--namespace", "gcsfuse-csi").CombinedOutput(); err != nil {
		return fmt.Errorf("the packaged chart does not render: %v\n%s", err, out)
	}
	return nil
}

// buildPlugin cross-builds kubectl-gcsfuse, archives each build and writes the krew manifest.
func buildPlugin(ctx context.Context, o options) error {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	var plats []krewPlatform
	for _, platform := range o.pluginPlatforms {
		goos, goarch, _ := strings.Cut(platform, "/")
		p := struct{ goos, goarch string }{goos, goarch}
		tmp, err := os.MkdirTemp("", "kubectl-gcsfuse-")
		if err != nil {
			return err
		}
		bin := filepath.Join(tmp, "kubectl-gcsfuse")
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/kubectl-gcsfuse")
		// GOWORK=off: the product module alone, as a user's go install builds it.
		cmd.Dir, cmd.Env = o.repoRoot, append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0", "GOOS="+p.goos, "GOARCH="+p.goarch)
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("go build %s/%s: %v\n%s", p.goos, p.goarch, err, out)
		}
		archive := fmt.Sprintf("kubectl-gcsfuse_%s_%s.tar.gz", p.goos, p.goarch)
		sum, err := tarGz(filepath.Join(o.out, archive), map[string]string{"kubectl-gcsfuse": bin, "LICENSE": filepath.Join(o.repoRoot, "LICENSE")})
		os.RemoveAll(tmp)
		if err != nil {
			return err
		}
		plats = append(plats, krewPlatform{goos: p.goos, goarch: p.goarch, uri: strings.TrimSuffix(o.downloadURL, "/") + "/" + archive, sha256: sum})
	}
	return writeFile(filepath.Join(o.out, "krew", "gcsfuse.yaml"), krewManifest(o.version, plats))
}

type krewPlatform struct{ goos, goarch, uri, sha256 string }

// krewManifest is the krew plugin manifest (krew.googlecontainertools.github.com/v1alpha2).
func krewManifest(version string, plats []krewPlatform) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: gcsfuse
spec:
  version: %s
  homepage: https://github.com/gcsfuse-csi/gcsfuse-csi
  shortDescription: Audit manifests for the gcsfuse-csi driver
  description: |
    kubectl gcsfuse audit judges pods, workloads, claims, volumes and classes (from files or
    the cluster) as the gcsfuse-csi driver's webhook and provisioner would: what each volume
    attribute, option and annotation becomes, or why it is refused.
  platforms:
`, version)
	for _, p := range plats {
		fmt.Fprintf(&b, `  - selector:
      matchLabels:
        os: %s
        arch: %s
    uri: %s
    sha256: %s
    bin: kubectl-gcsfuse
    files:
      - from: kubectl-gcsfuse
        to: .
      - from: LICENSE
        to: .
`, p.goos, p.goarch, p.uri, p.sha256)
	}
	return b.Bytes()
}

// tarGz writes files (name in the archive -> path) as a gzipped tar at out and returns its
// sha256.
func tarGz(out string, files map[string]string) (string, error) {
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(gz)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		data, err := os.ReadFile(files[name])
		if err != nil {
			f.Close()
			return "", err
		}
		mode := int64(0o644)
		if name == "kubectl-gcsfuse" {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			f.Close()
			return "", err
		}
		if _, err := tw.Write(data); err != nil {
			f.Close()
			return "", err
		}
	}
	if err := errors.Join(tw.Close(), gz.Close(), f.Close()); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeChecksums writes SHA256SUMS of every file under dir (sha256sum -c reads it).
func writeChecksums(dir string) error {
	var b bytes.Buffer
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%x  %s\n", sha256.Sum256(data), filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "SHA256SUMS"), b.Bytes())
}

func writeFile(p string, data []byte) error { return os.WriteFile(p, data, 0o644) }
