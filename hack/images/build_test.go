package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestImageReproducible: the same inputs make the same image digest, so an unchanged tree
// pushes nothing new and a team can check a published image against its own build; a
// different binary makes a different one.
func TestImageReproducible(t *testing.T) {
	bins := t.TempDir()
	spec := imageSpec{name: "webhook", bin: "gcsfuse-webhook", user: "65534"}
	digest := func(content string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bins, spec.bin), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		img, err := buildImage(spec, "arm64", bins, "", []byte("ca"), false)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	a, b, c := digest("binary v1"), digest("binary v1"), digest("binary v2")
	if a != b {
		t.Errorf("same inputs, digests %s and %s", a, b)
	}
	if a == c {
		t.Errorf("different binaries, same digest %s", a)
	}
}
