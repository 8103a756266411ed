// Package imagefs reads a container image's file system, its layers flattened as the
// container sees them, for the tools that look inside the images they build (hack/images'
// tests, hack/release's SBOMs).
package imagefs

import (
	"archive/tar"
	"errors"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Walk calls fn for each entry of img's file system, with a reader of its content; an
// error of fn stops the walk and is returned.
func Walk(img v1.Image, fn func(h *tar.Header, content io.Reader) error) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(h, tr); err != nil {
			return err
		}
	}
}
