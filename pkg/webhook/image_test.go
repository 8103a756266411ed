package webhook

import (
	"strings"
	"testing"
)

func TestValidateImageReference(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	valid := []string{
		"busybox",
		"busybox:1.36",
		"library/busybox:latest",
		"gcr.io/project/gcsfuse-sidecar:v1.2.3",
		"us-docker.pkg.dev/p/repo/img_name:tag-1.0",
		"localhost:5000/a/b/c",
		"registry.example.com:443/ns/img@" + digest,
		"img:tag@" + digest,
		"[::1]:5000/img:v1",
		"Registry.Example.com/img",
		"a__b/c-d---e/f.g",
	}
	invalid := []string{
		"",
		" busybox",
		"busybox ",
		"Busybox",
		"img:",
		"img:-tag",
		"img@sha256:abc",
		"img@" + digest + ":tag",
		"a//b",
		"http://img",
		"img name",
		"img:tag:tag",
		"-img",
		"img-",
		"/img",
		"img/",
		strings.Repeat("a", 256),
		"img:" + strings.Repeat("t", 129),
	}
	for _, s := range valid {
		if err := validateImageReference(s); err != nil {
			t.Errorf("validateImageReference(%q) = %v, want valid", s, err)
		}
	}
	for _, s := range invalid {
		if err := validateImageReference(s); err == nil {
			t.Errorf("validateImageReference(%q) accepted an invalid reference", s)
		}
	}
}
