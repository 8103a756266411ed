package main

import v1 "github.com/google/go-containerregistry/pkg/v1"

// imageSpec is what one image holds and how it starts. The table below is the one
// description of the images: the build here packs it, and the Dockerfiles under build/ are
// checked against it (dockerfile_test.go), so the two ways to build cannot drift apart.
type imageSpec struct {
	// name is the image's name under the repository ($IMAGE_REPO/<name>:$IMAGE_TAG).
	name string
	// pkg is the Go package of its binary, built static (CGO_ENABLED=0) for each platform.
	pkg string
	// bin is the binary's name, installed at /<bin>: the entrypoint.
	bin string
	// args follow the binary in the entrypoint.
	args []string
	// user is the numeric user it runs as: 65534 (nobody) unless it needs root.
	user string
	// gcsfuse: the pinned gcsfuse is installed at /gcsfuse too (the sidecar runs it).
	gcsfuse bool
	// release: built for every release platform and pushed by hack/release-images.sh; the
	// others serve the local cluster's tests only.
	release bool
}

// images are the project's images. The node plugin runs as root (it mounts); the sidecar,
// webhook, controller (the dynamic provisioner) and emulator as nobody.
var images = []imageSpec{
	{name: "node", pkg: "./cmd/gcsfuse-csi-node", bin: "gcsfuse-csi-node", user: "0", release: true},
	{name: "sidecar", pkg: "./cmd/gcsfuse-sidecar", bin: "gcsfuse-sidecar", user: "65534", gcsfuse: true, release: true},
	{name: "webhook", pkg: "./cmd/gcsfuse-webhook", bin: "gcsfuse-webhook", user: "65534", release: true},
	{name: "controller", pkg: "./cmd/gcsfuse-csi-controller", bin: "gcsfuse-csi-controller", user: "65534", release: true},
	{name: "emulator", pkg: "./test/gcs-emulator", bin: "gcs-emulator", user: "65534"},
	{name: "workload", pkg: "./test/e2e/workload", bin: "workload", user: "0"},
	{name: "pause", pkg: "./test/e2e/workload", bin: "workload", args: []string{"pause"}, user: "0"},
}

// entrypoint is the image's entrypoint: its binary at the root, then its arguments.
func (s imageSpec) entrypoint() []string {
	return append([]string{"/" + s.bin}, s.args...)
}

// config is the image's runtime config: its user and entrypoint, PATH=/.
func (s imageSpec) config() v1.Config {
	return v1.Config{User: s.user, Entrypoint: s.entrypoint(), Env: []string{pathEnv}}
}

// The root file system every image shares besides its binaries: /etc/passwd and /etc/group
// so that uid 65534 resolves, a world-writable sticky /tmp, and the CA bundle at
// caBundlePath (without it gcsfuse cannot reach Google Cloud Storage over TLS).
const (
	passwd       = "root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n"
	group        = "root:x:0:\nnogroup:x:65534:\n"
	caBundlePath = "etc/ssl/certs/ca-certificates.crt"
	// pathEnv is the images' only environment variable: the binaries live at the root.
	pathEnv = "PATH=/"
)

// buildFlags are the `go build` flags of every binary: static, reproducible, stripped;
// main.version is the image tag.
func buildFlags(tag string) []string {
	return []string{"-trimpath", "-ldflags", "-s -w -X main.version=" + tag}
}
