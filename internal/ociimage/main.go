// Command ociimage builds the release's multi-arch image from
// packaging/Containerfile and per-platform build contexts, and pushes it
// (an OCI image index) to a registry; `make release` runs it.
//
// Why not podman or buildah, as `make image` uses: the image is FROM
// scratch with only COPY, so there is nothing to run and building needs no
// container engine, storage driver, root or emulation; the layers carry the
// commit's time for every file, so the same commit gives the same digests
// on any machine; and it pushes to any registry with the credentials of
// ~/.docker/config.json (cosign's and helm's too), plain HTTP only on
// loopback.
package main

import (
	"archive/tar"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"
)

// multi is a repeatable KEY=VALUE flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var platforms, buildArgs multi
	containerfile := flag.String("containerfile", "packaging/Containerfile", "the Containerfile to build")
	ref := flag.String("ref", "", "where to push the image index, REGISTRY/REPOSITORY:TAG")
	created := flag.String("created", "", "RFC 3339 time of every file and of the image (the commit's time; empty: the Unix epoch)")
	digestFile := flag.String("digest-file", "", "write the pushed index's digest (sha256:...) to this file")
	flag.Var(&platforms, "platform", "OS/ARCH=DIR: one image for OS/ARCH from the build context DIR (repeatable)")
	flag.Var(&buildArgs, "build-arg", "NAME=VALUE for an ARG of the Containerfile (repeatable)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: ociimage -ref REGISTRY/REPO:TAG -platform linux/amd64=DIR [-platform ...] [flags]\n\n"+
			"Builds one image per platform from a FROM scratch Containerfile of COPY instructions and pushes them as one OCI image index.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{})
	if err := run(*containerfile, *ref, *created, *digestFile, platforms, buildArgs, log); err != nil {
		log.WithError(err).Error("ociimage failed")
		os.Exit(1)
	}
}

func run(containerfile, ref, created, digestFile string, platforms, buildArgs []string, log *logrus.Logger) error {
	if ref == "" || len(platforms) == 0 {
		return fmt.Errorf("-ref and at least one -platform are required")
	}
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-ref %s: %w", ref, err)
	}
	when := time.Unix(0, 0).UTC()
	if created != "" {
		if when, err = time.Parse(time.RFC3339, created); err != nil {
			return fmt.Errorf("-created: %w", err)
		}
	}
	args := map[string]string{}
	for _, a := range buildArgs {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("-build-arg %q: not NAME=VALUE", a)
		}
		args[k] = v
	}
	data, err := os.ReadFile(containerfile)
	if err != nil {
		return err
	}
	sp, err := parseContainerfile(string(data), args)
	if err != nil {
		return fmt.Errorf("%s: %w", containerfile, err)
	}
	idx, err := buildIndex(sp, platforms, when)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return fmt.Errorf("push %s: %w", tag, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"ref": tag.String(), "digest": d.String(), "platforms": len(platforms)}).Info("pushed the image index")
	if digestFile != "" {
		return os.WriteFile(digestFile, []byte(d.String()+"\n"), 0o644)
	}
	return nil
}

// buildIndex makes one image per OS/ARCH=DIR and the index listing them.
func buildIndex(sp *spec, platforms []string, when time.Time) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		plat, dir, ok := strings.Cut(p, "=")
		osName, arch, ok2 := strings.Cut(plat, "/")
		if !ok || !ok2 {
			return nil, fmt.Errorf("-platform %q: not OS/ARCH=DIR", p)
		}
		img, err := buildImage(sp, osName, arch, dir, when)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", plat, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}},
		})
	}
	return idx, nil
}

// buildImage is the image of one platform: a single layer of the COPY
// instructions' files from dir, and the Containerfile's configuration.
func buildImage(sp *spec, osName, arch, dir string, when time.Time) (v1.Image, error) {
	// The tar goes to a file beside the context, not memory: four
	// platforms' binaries are hundreds of megabytes.
	layerPath := filepath.Clean(dir) + ".layer.tar"
	if err := writeLayer(layerPath, sp.Copies, dir, when); err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromFile(layerPath, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: l, History: v1.History{
		Created: v1.Time{Time: when}, CreatedBy: "COPY (ociimage)",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = osName, arch, v1.Time{Time: when}
	cf.Config = v1.Config{Labels: sp.Labels, User: sp.User, Entrypoint: sp.Entrypoint, Cmd: sp.Cmd}
	return mutate.ConfigFile(img, cf)
}

// layer is the tar of every COPY's files, with their parent directories,
// owned by root, each with the file's own permission bits and the time
// when: what `podman build` of the Containerfile puts in the image, minus
// the build time that would change the digest at every build.
func writeLayer(out string, copies []copyOp, dir string, when time.Time) (err error) {
	files := map[string]string{} // path in the image -> path on disk
	for _, c := range copies {
		t, err := c.Targets()
		if err != nil {
			return err
		}
		for src, dst := range t {
			if strings.Contains(src, "..") || filepath.IsAbs(src) {
				return fmt.Errorf("COPY %s: outside the build context", src)
			}
			files[strings.TrimPrefix(dst, "/")] = filepath.Join(dir, src)
		}
	}
	var paths []string
	dirs := map[string]bool{}
	for p := range files {
		paths = append(paths, p)
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	for d := range dirs {
		paths = append(paths, d)
	}
	sort.Strings(paths)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	for _, p := range paths {
		if dirs[p] {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o755, ModTime: when, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		if err := addFile(tw, p, files[p], when); err != nil {
			return err
		}
	}
	return tw.Close()
}

// addFile writes the regular file src as name.
func addFile(tw *tar.Writer, name, src string, when time.Time) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(st.Mode().Perm()), Size: st.Size(), ModTime: when, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}
