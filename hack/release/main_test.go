package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// The chart's own values.yaml gets every image pinned, its comments kept; a values.yaml
// whose images changed shape is an error, not a chart with an image left unpinned.
func TestPinValues(t *testing.T) {
	values, err := os.ReadFile("../../deploy/chart/gcsfuse-csi/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{"node": digest, "webhook": digest, "controller": digest, "sidecar": digest}
	out, err := pinValues(values, "registry.example.com/gcsfuse-csi", "v0.2.0", digests)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Images map[string]struct{ Repository, Tag, Digest string }
	}
	if err := yaml.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	for _, name := range imageNames {
		img := v.Images[name]
		if img.Repository != "registry.example.com/gcsfuse-csi/"+name || img.Tag != "v0.2.0" || img.Digest != digest {
			t.Errorf("image %s: %+v", name, img)
		}
	}
	if !strings.Contains(string(out), "# The dynamic provisioner (controller.enabled).") || len(out) < len(values) {
		t.Error("comments lost")
	}
	if _, err := pinValues([]byte("images:\n  node:\n    repository: x\n    tag: y\n"), "r", "v0.2.0", digests); err == nil {
		t.Error("a values.yaml without digests was pinned")
	}
	// Only the images: block: a node: under another key keeps its values, and an image
	// named there but not under images: is not pinned.
	other := "mounter:\n  node:\n    repository: keep\n    tag: keep\n    digest: \"\"\n"
	out, err = pinValues([]byte(other+string(values)), "registry.example.com/gcsfuse-csi", "v0.2.0", digests)
	if err != nil || !strings.HasPrefix(string(out), other) {
		t.Errorf("another key's node: rewritten (%v):\n%.200s", err, out)
	}
	// CRLF line endings, a comment after images:, no final newline: pinned all the same.
	crlf := strings.ReplaceAll(strings.Replace(string(values), "images:\n", "images: # the driver's\n", 1), "\n", "\r\n")
	if out, err := pinValues([]byte(strings.TrimRight(crlf, "\r\n")), "r.example.com/g", "v0.2.0", digests); err != nil || !strings.Contains(string(out), "digest: \""+digest+"\"") {
		t.Errorf("CRLF values: %v", err)
	}
	withoutNode := strings.Replace(string(values), "  node:\n", "  nodeX:\n", 1)
	if _, err := pinValues([]byte(other+withoutNode), "r", "v0.2.0", digests); err == nil {
		t.Error("an images: block without node was pinned from another key's node:")
	}
}

// An image's SBOM lists each Go binary of each platform (found by its build information, a
// file that is not Go left out) with its modules and sha256.
func TestImageSBOM(t *testing.T) {
	exe, err := os.Executable() // a Go binary with build information
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	layer := tarLayer(t, map[string][]byte{"gcsfuse-csi-node": bin, "etc/not-go": []byte("#!/bin/sh\n")})
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	js, err := imageSBOM(idx, "node", "v0.2.0", digest)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat string
		Metadata  struct {
			Component struct{ Name, Version string }
		}
		Components []struct {
			Name, Version string
			Hashes        []struct{ Content string }
			Components    []struct{ Name, Purl string }
			Properties    []struct{ Name, Value string }
		}
	}
	if err := json.Unmarshal(js, &bom); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	if !strings.Contains(string(js), `"specVersion": "1.6"`) {
		t.Errorf("not CycloneDX 1.6: %.200s", js)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != "gcsfuse-csi/node" || len(bom.Components) != 1 {
		t.Fatalf("BOM %s", js)
	}
	c := bom.Components[0]
	if c.Name != "/gcsfuse-csi-node" || len(c.Hashes) != 1 || c.Hashes[0].Content != hex.EncodeToString(sum[:]) || len(c.Components) == 0 ||
		!strings.Contains(string(js), `"linux/arm64"`) || !strings.Contains(string(js), "pkg:golang/github.com/CycloneDX/cyclonedx-go@v0.12.0") {
		t.Errorf("component %+v", c)
	}
	// An image with no Go binary cannot be described: an error, not an empty SBOM.
	empty1, _ := mutate.AppendLayers(empty.Image, tarLayer(t, map[string][]byte{"etc/not-go": []byte("x")}))
	if _, err := imageSBOM(mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: empty1, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}}), "node", "v0.2.0", digest); err == nil {
		t.Error("an image without a Go binary got an SBOM")
	}
}

func tarLayer(t *testing.T, files map[string][]byte) v1.Layer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Close()
	data := b.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The krew manifest names each platform's archive with its sha256, and SHA256SUMS every
// file, as sha256sum -c reads them.
func TestKrewAndChecksums(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bin")
	os.WriteFile(src, []byte("binary"), 0o755)
	out := filepath.Join(dir, "out")
	os.MkdirAll(out, 0o755)
	sum, err := tarGz(filepath.Join(out, "kubectl-gcsfuse_linux_arm64.tar.gz"), map[string]string{"kubectl-gcsfuse": src})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(out, "kubectl-gcsfuse_linux_arm64.tar.gz"))
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
		t.Errorf("tarGz sum %s, file %x", sum, got)
	}
	gz, _ := gzip.NewReader(bytes.NewReader(data))
	tr := tar.NewReader(gz)
	h, err := tr.Next()
	if err != nil || h.Name != "kubectl-gcsfuse" || h.Mode != 0o755 {
		t.Errorf("archive entry %+v %v", h, err)
	}
	body, _ := io.ReadAll(tr)
	if string(body) != "binary" {
		t.Errorf("archive body %q", body)
	}
	m := krewManifest("v0.2.0", []krewPlatform{{"linux", "arm64", "https://example.com/r/kubectl-gcsfuse_linux_arm64.tar.gz", sum}})
	var plugin struct {
		Kind string
		Spec struct {
			Version   string
			Platforms []struct {
				URI, Sha256, Bin string
				Selector         struct{ MatchLabels map[string]string }
			}
		}
	}
	if err := yaml.Unmarshal(m, &plugin); err != nil {
		t.Fatal(err)
	}
	if p := plugin.Spec.Platforms; plugin.Kind != "Plugin" || plugin.Spec.Version != "v0.2.0" || len(p) != 1 || p[0].Sha256 != sum ||
		p[0].Selector.MatchLabels["arch"] != "arm64" || p[0].Bin != "kubectl-gcsfuse" {
		t.Errorf("krew manifest:\n%s", m)
	}
	if err := writeChecksums(out); err != nil {
		t.Fatal(err)
	}
	sums, _ := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if want := sum + "  kubectl-gcsfuse_linux_arm64.tar.gz\n"; string(sums) != want {
		t.Errorf("SHA256SUMS %q, want %q", sums, want)
	}
}

// Bad flags are refused before anything is written.
func TestValidate(t *testing.T) {
	good := options{version: "v0.2.0", repo: "localhost:5000/gcsfuse-csi", oci: "/x", out: filepath.Join(t.TempDir(), "new"), helm: "helm",
		downloadURL: "https://example.com/r", sourceDate: time.Unix(1796000000, 0), pluginPlatforms: []string{"linux/amd64", "darwin/arm64"}}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*options){
		func(o *options) { o.version = "0.2.0" },
		func(o *options) { o.repo = "registry.example.com/x:tag" },
		func(o *options) { o.repo = "registry.example.com/Team" },
		func(o *options) { o.sourceDate = time.Time{} },
		func(o *options) { o.out = t.TempDir() },
		func(o *options) { o.downloadURL = "http://example.com" },
		func(o *options) { o.helm = "" },
		func(o *options) { o.pluginPlatforms = []string{"windows/amd64"} },
		func(o *options) { o.pluginPlatforms = []string{""} },
		func(o *options) { o.pluginPlatforms = []string{"linux/amd64", "linux/amd64"} },
	} {
		o := good
		bad(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// Package URLs percent-encode what the spec says; a local replacement has none.
func TestPurl(t *testing.T) {
	for in, want := range map[[2]string]string{
		{"github.com/a/b", "v1.2.3"}:              "pkg:golang/github.com/a/b@v1.2.3",
		{"github.com/a/b", "v2.0.0+incompatible"}: "pkg:golang/github.com/a/b@v2.0.0%2Bincompatible",
		{"example.com/m", "(devel)"}:              "pkg:golang/example.com/m",
		{"../local", ""}:                          "",
	} {
		if got := purl(in[0], in[1]); got != want {
			t.Errorf("purl(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}

// An image's OCI layout, as hack/images writes it (one index, both platforms, the name
// ctr import takes), is described by its index digest and archived whole, with fixed modes
// and times; one missing a platform is refused.
func TestDescribeAndArchiveLayout(t *testing.T) {
	exe, _ := os.Executable()
	bin, _ := os.ReadFile(exe)
	var adds []mutate.IndexAddendum
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := mutate.AppendLayers(empty.Image, tarLayer(t, map[string][]byte{"gcsfuse-sidecar": bin}))
		if err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx := mutate.AppendManifests(empty.Index, adds...)
	dir := filepath.Join(t.TempDir(), "sidecar")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"io.containerd.image.name": "registry.example.com/gcsfuse-csi/sidecar:v0.2.0"})); err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	digest, sbom, err := describeImage(dir, "sidecar", "v0.2.0", []string{"linux/amd64", "linux/arm64"})
	if err != nil || digest != want.String() || !strings.Contains(string(sbom), "linux/arm64:/gcsfuse-sidecar") {
		t.Fatalf("digest %s (want %s), %v", digest, want, err)
	}
	if _, _, err := describeImage(dir, "sidecar", "v0.2.0", []string{"linux/s390x"}); err == nil {
		t.Error("a layout without linux/s390x passed for it")
	}
	at := time.Unix(1796000000, 0)
	out := filepath.Join(t.TempDir(), "sidecar.oci.tar")
	if err := tarDir(dir, out, at); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(out)
	defer f.Close()
	tr := tar.NewReader(f)
	names := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
		if !h.ModTime.Equal(at) || (h.Typeflag == tar.TypeReg && h.Mode != 0o644) {
			t.Errorf("%s: time %s, mode %o", h.Name, h.ModTime, h.Mode)
		}
		if h.Name == "index.json" {
			body, _ := io.ReadAll(tr)
			if !strings.Contains(string(body), "registry.example.com/gcsfuse-csi/sidecar:v0.2.0") {
				t.Errorf("index.json lost the name ctr import takes: %s", body)
			}
		}
	}
	if !names["oci-layout"] || !names["index.json"] || !names["blobs/"] {
		t.Errorf("archive entries %v", names)
	}
}
