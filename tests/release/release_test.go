package release

import (
	"archive/tar"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
	"github.com/iptables-alerter/iptables-alerter/tests/kube/kubetest"
	"github.com/iptables-alerter/iptables-alerter/tests/release/reltest"
)

func repo(testing.TB) string { return reltest.Repo() }

// startRegistry runs go-containerregistry's registry (in memory, the
// distribution API) in the test process on a loopback port, and returns
// its host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	return serve(t, registry.New(registry.Logger(log.New(io.Discard, "", 0))))
}

// serve serves h on a loopback port until the test ends; it returns the
// address.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// run runs a command with env added to the test's environment and
// returns its output; a failure stops the test with the output.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// testPlatforms are the platforms the test's release builds: amd64 and
// the one big-endian platform, s390x. A real release builds make's default
// RELEASE_PLATFORMS, all four of wantMachine (TestReleaseDefaultPlatforms);
// arm64 and ppc64le go through the same loop as amd64, and each platform
// is a cold cross-build of client-go on a fresh machine (minutes each).
var testPlatforms = []string{"linux/amd64", "linux/s390x"}

// The release as a maintainer makes it and an admin installs it: make
// release into a registry that is empty and holds nothing else, the
// signatures verified with the public key (and refused with another), and
// then the cluster install from that registry only, in one command per
// route: helm install oci://..., and kubectl apply -k of the overlay the
// release wrote. Against a real kube-apiserver (no kubelet: the pods are
// not run, the DaemonSet's image is what is checked).
func TestRelease(t *testing.T) {
	kubetest.Need(t)
	_, err := exec.LookPath("kubectl")
	nstest.Need(t, err == nil, "needs kubectl on PATH (tests/install-deps.sh all)")
	cosign := reltest.Need(t)

	reg := startRegistry(t)
	registry := reg + "/iptables-alerter"
	tmp := t.TempDir()
	env := reltest.Env(t, filepath.Join(tmp, "home"))
	keys, other := filepath.Join(tmp, "keys"), filepath.Join(tmp, "other")
	reltest.KeyPair(t, cosign, env, keys)
	reltest.KeyPair(t, cosign, env, other)

	dist := filepath.Join(tmp, "dist")
	const version, chartVersion = "v1.2.3", "1.2.3"
	// The static chart repository make release writes, served from dist as
	// GitHub serves a release's files: index.yaml and the .tgz it points at.
	charts := startChartRepo(t, dist, version)
	chartURL := charts + "/download/" + version
	digest := reltest.Make(t, env, version, registry, dist, keys, testPlatforms, "CHART_REPO_URL="+chartURL)
	image := registry + "/iptables-alerter"
	chart := registry + "/charts/iptables-alerter"

	t.Run("image", func(t *testing.T) { checkImage(t, image+":"+version, digest) })

	t.Run("signatures", func(t *testing.T) {
		// The public key the release wrote, as its users get it.
		pub, otherPub := filepath.Join(dist, "cosign.pub"), filepath.Join(other, "cosign.pub")
		for _, ref := range []string{image + "@" + digest, image + ":" + version, chart + ":" + chartVersion} {
			run(t, tmp, env, cosign, "verify", "--key", pub, "--insecure-ignore-tlog=true", ref)
			if out, err := runErr(tmp, env, cosign, "verify", "--key", otherPub, "--insecure-ignore-tlog=true", ref); err == nil {
				t.Errorf("cosign verify %s with another key passed:\n%s", ref, out)
			}
		}
		out := run(t, tmp, env, cosign, "verify-attestation", "--key", pub, "--insecure-ignore-tlog=true", "--type", "cyclonedx", image+"@"+digest)
		if !strings.Contains(out, "github.com/iptables-alerter/iptables-alerter") && !strings.Contains(out, "payload") {
			t.Errorf("verify-attestation printed no attestation:\n%s", out)
		}
		run(t, dist, env, cosign, "verify-blob", "--key", pub, "--insecure-ignore-tlog=true", "--signature", "SHA256SUMS.sig", "SHA256SUMS")
	})

	t.Run("files", func(t *testing.T) { checkFiles(t, dist, env, chartURL, chartVersion) })
	t.Run("archives", func(t *testing.T) { checkArchives(t, dist, version) })

	// The OpenShift console's route (packaging/openshift/helmchartrepository.yaml):
	// an http(s) repository's index.yaml at the latest release's download
	// address, then the chart at the URL the index gives.
	t.Run("chart repository", func(t *testing.T) {
		run(t, tmp, env, "helm", "repo", "add", "iptables-alerter", charts+"/latest/download")
		pulled := filepath.Join(tmp, "pulled")
		if err := os.Mkdir(pulled, 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, tmp, env, "helm", "pull", "iptables-alerter/iptables-alerter", "--version", chartVersion, "--destination", pulled)
		if _, err := os.Stat(filepath.Join(pulled, "iptables-alerter-"+chartVersion+".tgz")); err != nil {
			t.Errorf("helm pull through the chart repository: %v", err)
		}
	})

	t.Run("install", func(t *testing.T) {
		c := kubetest.Start(t)
		// Deleting the kustomize install's namespace finishes, as on a
		// cluster, before the Helm route makes it again.
		c.ControllerManager(t, "namespace")
		kc := c.Kubeconfig("admin", c.AdminToken)
		kenv := append(env, "KUBECONFIG="+kc)
		// The Prometheus Operator's kinds the base and the chart render.
		crds := filepath.Join(tmp, "crds.yaml")
		if err := os.WriteFile(crds, []byte(kubetest.MinimalCRD("monitoring.coreos.com", "Namespaced", "ServiceMonitor", "servicemonitors")+
			"---\n"+kubetest.MinimalCRD("monitoring.coreos.com", "Namespaced", "PrometheusRule", "prometheusrules")), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, tmp, kenv, "kubectl", "apply", "--server-side", "-f", crds)
		run(t, tmp, kenv, "kubectl", "wait", "--for=condition=Established", "--timeout=60s",
			"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com")

		// The kustomize route on a cluster without the Report CRDs: the two
		// commands of docs/release.md, the CRDs and the overlay make release
		// wrote.
		run(t, tmp, kenv, "kubectl", "apply", "-k", filepath.Join(repo(t), "packaging/crds"))
		run(t, tmp, kenv, "kubectl", "apply", "-k", filepath.Join(dist, "kustomize"))
		if got, want := dsImage(t, tmp, kenv), image+"@"+digest; got != want {
			t.Errorf("kubectl apply -k: DaemonSet image %q, want %q", got, want)
		}
		run(t, tmp, kenv, "kubectl", "wait", "--for=condition=Established", "--timeout=60s",
			"crd/reports.openreports.io", "crd/clusterreports.openreports.io")
		run(t, tmp, kenv, "kubectl", "delete", "-k", filepath.Join(dist, "kustomize"), "--timeout=3m")

		// The one command of docs/release.md's Helm route, where the
		// kustomize route's CRDs stay (as on a cluster moving to Helm, or
		// one where Kyverno installed them): the chart leaves them alone.
		run(t, tmp, kenv, "helm", "install", "iptables-alerter", "oci://"+registry+"/charts/iptables-alerter", "--version", chartVersion,
			"--plain-http", "--namespace", "iptables-alerter", "--create-namespace")
		if got, want := dsImage(t, tmp, kenv), image+":"+version+"@"+digest; got != want {
			t.Errorf("helm install: DaemonSet image %q, want %q", got, want)
		}
		if owner := run(t, tmp, kenv, "kubectl", "get", "crd/reports.openreports.io", "-o",
			`jsonpath={.metadata.annotations.meta\.helm\.sh/release-name}`); strings.TrimSpace(owner) != "" {
			t.Errorf("helm install took over the Report CRD kubectl installed (release %q)", owner)
		}
		run(t, tmp, kenv, "helm", "uninstall", "iptables-alerter", "--namespace", "iptables-alerter", "--wait")
	})
}

// dsImage is the image of every container of the DaemonSet, which must
// all be the same.
func dsImage(t *testing.T, dir string, env []string) string {
	t.Helper()
	out := run(t, dir, env, "kubectl", "-n", "iptables-alerter", "get", "daemonset/iptables-alerter", "-o",
		`jsonpath={range .spec.template.spec.initContainers[*]}{.image}{"\n"}{end}{range .spec.template.spec.containers[*]}{.image}{"\n"}{end}`)
	images := strings.Fields(out)
	if len(images) == 0 {
		t.Fatalf("the DaemonSet has no containers")
	}
	for _, i := range images[1:] {
		if i != images[0] {
			t.Errorf("DaemonSet containers run %q and %q", images[0], i)
		}
	}
	return images[0]
}

// wantMachine is the ELF machine and byte order of each platform's binaries.
var wantMachine = map[string]struct {
	m     elf.Machine
	order string
}{
	"amd64":   {elf.EM_X86_64, "LittleEndian"},
	"arm64":   {elf.EM_AARCH64, "LittleEndian"},
	"ppc64le": {elf.EM_PPC64, "LittleEndian"},
	"s390x":   {elf.EM_S390, "BigEndian"},
}

// checkImage reads the pushed index back: one image per platform built
// (testPlatforms) and no other, each with the Containerfile's
// configuration and binaries built for it.
func checkImage(t *testing.T, ref, digest string) {
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d.String() != digest {
		t.Errorf("the tag's index is %s, make release wrote %s", d, digest)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range im.Manifests {
		arch := m.Platform.Architecture
		if seen[arch] || m.Platform.OS != "linux" {
			t.Errorf("the index lists %s/%s again or for another OS", m.Platform.OS, arch)
		}
		seen[arch] = true
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch || cf.OS != "linux" || cf.Config.User != "65534:65534" ||
			strings.Join(cf.Config.Entrypoint, " ") != "/usr/bin/iptables-alerter" ||
			cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" {
			t.Errorf("%s: config %s/%s user %q entrypoint %q labels %v", arch, cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint, cf.Config.Labels)
		}
		checkBinaries(t, arch, img)
	}
	for _, p := range testPlatforms {
		if arch := strings.TrimPrefix(p, "linux/"); !seen[arch] {
			t.Errorf("the index has no %s image (has %v)", arch, seen)
		}
	}
	if len(seen) != len(testPlatforms) {
		t.Errorf("the index has images for %v, the release built %v", seen, testPlatforms)
	}
}

// checkBinaries finds the layer's files and each binary's ELF machine.
func checkBinaries(t *testing.T, arch string, img v1.Image) {
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers, %v; want 1", arch, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = true
		if !strings.HasPrefix(h.Name, "usr/bin/") || h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Mode&0o111 == 0 || h.Uid != 0 {
			t.Errorf("%s: %s mode %o uid %d", arch, h.Name, h.Mode, h.Uid)
		}
		// Enough of the ELF header for its machine and byte order.
		head := make([]byte, 4096)
		if _, err := io.ReadFull(tr, head); err != nil {
			t.Fatal(err)
		}
		// The ELF header alone (elf.NewFile also reads the section
		// headers, at the file's end): EI_DATA, then e_machine.
		if string(head[:4]) != elf.ELFMAG {
			t.Errorf("%s: %s is no ELF file", arch, h.Name)
			continue
		}
		var order binary.ByteOrder = binary.LittleEndian
		if elf.Data(head[elf.EI_DATA]) == elf.ELFDATA2MSB {
			order = binary.BigEndian
		}
		m := elf.Machine(order.Uint16(head[18:20]))
		if w := wantMachine[arch]; m != w.m || fmt.Sprint(order) != w.order {
			t.Errorf("%s: %s is %v %v, want %v %s", arch, h.Name, m, order, w.m, w.order)
		}
	}
	for _, f := range []string{"usr/bin/iptables-alerter", "usr/bin/iptables-alerter-agent", "usr/bin/iptables-alerter-hook", "usr/share/iptables-alerter/iptables-alerter.json"} {
		if !files[f] {
			t.Errorf("%s: the image has no %s (has %v)", arch, f, files)
		}
	}
}

// checkFiles: the checksums hold, the chart repository's index points at
// the chart's URL, the SBOM lists the module, and there is an RPM.
func checkFiles(t *testing.T, dist string, env []string, chartURL, chartVersion string) {
	run(t, dist, env, "sha256sum", "--strict", "-c", "SHA256SUMS")
	data, err := os.ReadFile(filepath.Join(dist, "index.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Entries map[string][]struct {
			Version string   `json:"version"`
			URLs    []string `json:"urls"`
		} `json:"entries"`
	}
	if err := yaml.Unmarshal(data, &index); err != nil {
		t.Fatal(err)
	}
	e := index.Entries["iptables-alerter"]
	if len(e) != 1 || e[0].Version != chartVersion || len(e[0].URLs) != 1 || e[0].URLs[0] != chartURL+"/iptables-alerter-"+chartVersion+".tgz" {
		t.Errorf("index.yaml entries %+v, want version %s at %s", e, chartVersion, chartURL)
	}
	var sbom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct{ Name string } `json:"component"`
		} `json:"metadata"`
		Components []struct{ Name string } `json:"components"`
	}
	data, err = os.ReadFile(filepath.Join(dist, "iptables-alerter.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &sbom); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range sbom.Components {
		names[c.Name] = true
	}
	if sbom.BOMFormat != "CycloneDX" || !names["github.com/sirupsen/logrus"] {
		t.Errorf("SBOM: format %q, %d components, none github.com/sirupsen/logrus", sbom.BOMFormat, len(sbom.Components))
	}
	rpms, _ := filepath.Glob(filepath.Join(dist, "*.rpm"))
	if len(rpms) == 0 {
		t.Errorf("no RPM in %s", dist)
	}
}

// startChartRepo serves dir on loopback the way GitHub serves the files of
// the release tag: /download/TAG/FILE, and /latest/download/FILE as a
// redirect there (helm, like the console's backend, follows it).
func startChartRepo(t *testing.T, dir, tag string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/download/"+tag+"/{file}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(dir, r.PathValue("file")))
	})
	mux.HandleFunc("/latest/download/{file}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/download/"+tag+"/"+r.PathValue("file"), http.StatusFound)
	})
	return "http://" + serve(t, mux)
}

// make release writes its public key, dist/cosign.pub, from COSIGN_KEY
// (SECURITY.md and docs/release.md say to verify with the release's
// cosign.pub, and no release had one), and github-release uploads it.
// Once the project's key is committed (RELEASE_KEY_PUB, cosign.pub at the
// top), another key stops the release before it signs anything.
func TestReleaseKey(t *testing.T) {
	cosign := reltest.Cosign(t)
	_, err := exec.LookPath("make")
	nstest.Need(t, err == nil, "needs make on PATH")
	tmp := t.TempDir()
	env := reltest.Env(t, filepath.Join(tmp, "home"))
	keys, other := filepath.Join(tmp, "keys"), filepath.Join(tmp, "other")
	reltest.KeyPair(t, cosign, env, keys)
	reltest.KeyPair(t, cosign, env, other)
	committed := filepath.Join(keys, "cosign.pub")
	makeKey := func(key string, vars ...string) (string, string, error) {
		dist := filepath.Join(t.TempDir(), "dist")
		out, err := runErr(repo(t), env, "make", append([]string{"--no-print-directory", "release-key", "COSIGN=" + cosign,
			"COSIGN_KEY=" + filepath.Join(key, "cosign.key"), "DIST=" + dist}, vars...)...)
		return dist, out, err
	}
	dist, out, err := makeKey(keys, "RELEASE_KEY_PUB="+committed)
	if err != nil {
		t.Fatalf("make release-key with the committed key's pair: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dist, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(strings.Fields(string(got)), "") != strings.Join(strings.Fields(string(want)), "") {
		t.Errorf("dist/cosign.pub:\n%s\nwant the key pair's:\n%s", got, want)
	}
	dist, out, err = makeKey(other, "RELEASE_KEY_PUB="+committed)
	if err == nil || !strings.Contains(out, "refusing to sign") {
		t.Errorf("make release-key with another key than the committed one: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dist, "cosign.pub")); !os.IsNotExist(err) {
		t.Errorf("the refused key's cosign.pub left in dist: %v", err)
	}
	// No key committed (a fork, the tests): any key.
	if _, out, err := makeKey(other, "RELEASE_KEY_PUB="+filepath.Join(tmp, "none.pub")); err != nil {
		t.Errorf("make release-key with no committed key: %v\n%s", err, out)
	}
}

// make release refuses a tree with changes, tracked or not: it releases
// HEAD, whose commit its binaries, image labels and RPM name, and with an
// explicit VERSION (no -dirty) nothing said the binaries held other
// code. RELEASE_DIRTY_OK (the tests') lets it go on. Run on a repository
// of the Makefile alone: the check comes before anything is built.
func TestReleaseRefusesDirtyTree(t *testing.T) {
	for _, c := range []string{"make", "git"} {
		_, err := exec.LookPath(c)
		nstest.Need(t, err == nil, "needs "+c+" on PATH")
	}
	dir := t.TempDir()
	mk, err := os.ReadFile(filepath.Join(repo(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), mk, 0o644); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "cosign.key")
	if err := os.WriteFile(key, []byte("not read: the release stops before"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitEnv := []string{"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1"}
	run(t, dir, gitEnv, "git", "init", "-q")
	run(t, dir, gitEnv, "git", "add", "Makefile")
	run(t, dir, gitEnv, "git", "commit", "-q", "-m", "x")
	const refused = "the tree has changes"
	release := func(vars ...string) (string, bool) {
		t.Helper()
		dist := filepath.Join(dir, "out")
		os.RemoveAll(dist)
		// COSIGN=false: a release past the check stops at its first tool.
		out, err := runErr(dir, nil, "make", append([]string{"--no-print-directory", "release", "VERSION=v1.2.3", "REGISTRY=registry.example/team",
			"COSIGN_KEY=" + key, "DIST=" + dist, "COSIGN=false"}, vars...)...)
		if err == nil {
			t.Fatalf("make release with COSIGN=false passed:\n%s", out)
		}
		_, statErr := os.Stat(dist)
		return out, statErr == nil
	}
	if out, started := release(); strings.Contains(out, refused) || !started {
		t.Errorf("a clean tree: refused or stopped before it started (dist made: %v):\n%s", started, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "extra.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, started := release(); !strings.Contains(out, refused) || !strings.Contains(out, "extra.go") || started {
		t.Errorf("a file not committed: not refused, or dist made (%v):\n%s", started, out)
	}
	if out, started := release("RELEASE_DIRTY_OK=1"); strings.Contains(out, refused) || !started {
		t.Errorf("RELEASE_DIRTY_OK=1: refused (dist made: %v):\n%s", started, out)
	}
	if err := os.Remove(filepath.Join(dir, "extra.go")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), append(mk, "# changed\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, started := release(); !strings.Contains(out, refused) || started {
		t.Errorf("a committed file changed: not refused, or dist made (%v):\n%s", started, out)
	}
}

// checkArchives opens the krew plugin's archive of each platform built:
// the full binary, built for it, and LICENSE, owned by root; SHA256SUMS
// lists it.
func checkArchives(t *testing.T, dist, version string) {
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range testPlatforms {
		arch := strings.TrimPrefix(p, "linux/")
		name := "iptables-alerter-" + version + "-linux-" + arch + ".tar.gz"
		if !strings.Contains(string(sums), "  "+name+"\n") {
			t.Errorf("SHA256SUMS does not list %s", name)
		}
		f, err := os.Open(filepath.Join(dist, name))
		if err != nil {
			t.Error(err)
			continue
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		files := map[string]bool{}
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = true
			if h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s: %s owned by %d:%d", name, h.Name, h.Uid, h.Gid)
			}
			if h.Name != "iptables-alerter" {
				continue
			}
			head := make([]byte, 20)
			if _, err := io.ReadFull(tr, head); err != nil {
				t.Fatal(err)
			}
			var order binary.ByteOrder = binary.LittleEndian
			if elf.Data(head[elf.EI_DATA]) == elf.ELFDATA2MSB {
				order = binary.BigEndian
			}
			if m := elf.Machine(order.Uint16(head[18:20])); string(head[:4]) != elf.ELFMAG || m != wantMachine[arch].m || h.Mode&0o111 == 0 {
				t.Errorf("%s: iptables-alerter is machine %v mode %o, want an executable for %v", name, m, h.Mode, wantMachine[arch].m)
			}
		}
		if !files["iptables-alerter"] || !files["LICENSE"] || len(files) != 2 {
			t.Errorf("%s holds %v, want iptables-alerter and LICENSE", name, files)
		}
	}
}
