package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// packOptions is one `pack` run: a directory packed as it is into a one-layer image.
type packOptions struct {
	ref    string // the image's tag, e.g. gcsfuse-csi.local/e2e-test-images/busybox:1.37.0-1
	rootfs string // the directory that becomes the image's root
	out    string // the `docker save` tar to write
	config string // the image's runtime config as JSON: {"Cmd":[...],"Env":[...],...}
	arch   string // GOARCH of the image (linux only)
}

// runPack is `images pack`: it packs the directory -rootfs into a one-layer linux image
// with the runtime config -config, tagged -ref, as a `docker save` tar at -out (its layer
// uncompressed, as hack/images.sh writes the project's images for the local cluster's
// containerd). The layer is reproducible (writeLayer): an unchanged directory keeps its
// digest, whatever the owners and times of its files.
func runPack(args []string) error {
	var o packOptions
	var platform string
	f := flag.NewFlagSet("pack", flag.ContinueOnError)
	f.Usage = func() {
		fmt.Fprintln(f.Output(), "usage: images pack -ref REF -rootfs DIR -out TAR [-config JSON] [-platform linux/ARCH]")
		f.PrintDefaults()
	}
	f.StringVar(&o.ref, "ref", "", "the image's reference, with its tag: REGISTRY/REPOSITORY:TAG")
	f.StringVar(&o.rootfs, "rootfs", "", "the directory that becomes the image's root file system")
	f.StringVar(&o.out, "out", "", "the docker-save tar to write (what ctr images import takes)")
	f.StringVar(&o.config, "config", "{}", `the image's runtime config, JSON (the OCI config's "config" object: Cmd, Entrypoint, Env, User, WorkingDir...)`)
	f.StringVar(&platform, "platform", "linux/"+runtime.GOARCH, "the image's platform (linux/amd64, linux/arm64)")
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("pack: unexpected arguments %q", f.Args())
	}
	if o.ref == "" || o.rootfs == "" || o.out == "" {
		f.Usage()
		return fmt.Errorf("pack: -ref, -rootfs and -out are required")
	}
	arches, err := parsePlatforms(platform)
	if err != nil {
		return fmt.Errorf("pack: %w", err)
	}
	if len(arches) != 1 {
		return fmt.Errorf("pack: -platform %q: want one platform", platform)
	}
	o.arch = arches[0]
	ref, err := name.NewTag(o.ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("pack: -ref: %w", err)
	}
	img, err := packImage(o)
	if err != nil {
		return err
	}
	if err := writeDockerTar(o.out, ref, img); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return fmt.Errorf("digest of %s: %w", ref, err)
	}
	fmt.Printf("%s@%s (linux/%s, from %s) in %s\n", ref.Name(), d, o.arch, o.rootfs, o.out)
	return nil
}

// packImage makes the image of a pack run: the directory's layer (dirLayer), uncompressed,
// and the config.
func packImage(o packOptions) (v1.Image, error) {
	config, err := parseConfig(o.config)
	if err != nil {
		return nil, err
	}
	layerTar, err := dirLayer(o.rootfs)
	if err != nil {
		return nil, fmt.Errorf("layer of %s: %w", o.rootfs, err)
	}
	img, err := newImage(o.arch, config, layerTar, true)
	if err != nil {
		return nil, fmt.Errorf("image of %s: %w", o.rootfs, err)
	}
	return img, nil
}

// parseConfig reads an image's runtime config; a field it does not know is an error (a
// misspelt "Command" would otherwise leave the image without its command). Field names
// match case-insensitively, as encoding/json does.
func parseConfig(s string) (v1.Config, error) {
	var c v1.Config
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("-config %s: %w", s, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return c, fmt.Errorf("-config %s: more than one JSON value", s)
	}
	return c, nil
}

// dirLayer packs the directory tree at root (root itself excluded: the image's / is the
// runtime's) with writeLayer: directories, regular files, symbolic links, and hard links
// (a regular file with more than one name is stored once, under its first name in sorted
// order, and linked to by the others). Modes are kept (permissions, setuid, setgid,
// sticky); owners become 0 and times 0. Other file types (devices, pipes, sockets) are an
// error.
func dirLayer(root string) ([]byte, error) {
	var entries []layerEntry
	inode := map[string]string{} // name of each regular file with more than one -> "device:inode"
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			if !d.IsDir() {
				return fmt.Errorf("%s: not a directory", root)
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := layerEntry{hdr: tar.Header{Name: rel, Mode: tarMode(info.Mode())}}
		switch info.Mode().Type() {
		case fs.ModeDir:
			e.hdr.Typeflag, e.hdr.Name = tar.TypeDir, rel+"/"
		case fs.ModeSymlink:
			e.hdr.Typeflag = tar.TypeSymlink
			if e.hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case 0:
			e.hdr.Typeflag, e.hdr.Size, e.src = tar.TypeReg, info.Size(), p
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
				inode[rel] = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
			}
		default:
			return fmt.Errorf("%s: %s is neither a directory, a regular file nor a symbolic link", p, info.Mode().Type())
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Hard links: the first name (sorted) of each file holds its contents, the others link to
	// it, so the result does not depend on the order the directory lists its names in.
	sortEntries(entries)
	first := map[string]string{} // device:inode -> first name
	for i := range entries {
		e := &entries[i]
		key, ok := inode[e.hdr.Name]
		if !ok {
			continue
		}
		if f, ok := first[key]; ok {
			e.hdr.Typeflag, e.hdr.Linkname, e.hdr.Size, e.src = tar.TypeLink, f, 0, ""
			continue
		}
		first[key] = e.hdr.Name
	}
	return writeLayer(entries)
}

// tarMode is a file's mode in a tar header: its permissions and its setuid, setgid and
// sticky bits.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
