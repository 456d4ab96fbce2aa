// Package reltest runs `make release` for the tests that check what it
// makes (tests/release) and install it (tests/cluster): its tools from the
// cache, an environment of the test's own, a cosign key pair, the make run.
package reltest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// Password unlocks the test's cosign keys (COSIGN_PASSWORD in Env).
const Password = "test-password"

// Repo is the repository's top directory, where make runs.
func Repo() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Cosign is the cache's cosign (tests/release/build-cosign.sh), skipping
// without it (a failure under CI=true).
func Cosign(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("IPTA_CACHE")
	if cache == "" {
		cache = "/var/cache/iptables-alerter"
	}
	cosign := filepath.Join(cache, "release", "bin", "cosign")
	_, err := os.Stat(cosign)
	nstest.Need(t, err == nil, "needs "+cosign+" (tests/release/build-cosign.sh)")
	return cosign
}

// Need checks what make release runs besides Go (cosign and
// cyclonedx-gomod from the cache, helm, rpmbuild, sha256sum and make on
// PATH), skipping without it (a failure under CI=true), and gives cosign's
// path.
func Need(t *testing.T) (cosign string) {
	t.Helper()
	for _, c := range []string{"helm", "rpmbuild", "sha256sum", "make"} {
		_, err := exec.LookPath(c)
		nstest.Need(t, err == nil, "needs "+c+" on PATH (tests/install-deps.sh all)")
	}
	cache := os.Getenv("IPTA_CACHE")
	if cache == "" {
		cache = "/var/cache/iptables-alerter"
	}
	bin := filepath.Join(cache, "release", "bin")
	for _, name := range []string{"cosign", "cyclonedx-gomod"} {
		_, err := os.Stat(filepath.Join(bin, name))
		nstest.Need(t, err == nil, "needs "+filepath.Join(bin, name)+" (tests/release/build-"+name+".sh)")
	}
	return filepath.Join(bin, "cosign")
}

// Env is what make release and cosign run with added to the test's
// environment: helm's, cosign's
// and the registry client's configuration under home, never the user's;
// the key's password; and the go command's build cache, module cache and
// configuration file as the test process's go sees them, so that the
// builds under that HOME still share the machine's caches (the packages
// other tests compiled, the modules downloaded) rather than start empty.
func Env(t *testing.T, home string) []string {
	t.Helper()
	env := []string{"HOME=" + home, "HELM_CONFIG_HOME=" + home + "/helm/config", "HELM_CACHE_HOME=" + home + "/helm/cache",
		"HELM_DATA_HOME=" + home + "/helm/data", "DOCKER_CONFIG=" + home + "/docker", "COSIGN_PASSWORD=" + Password}
	out, err := exec.Command("go", "env", "-json", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	var vars map[string]string
	if err := json.Unmarshal(out, &vars); err != nil {
		t.Fatalf("go env: %v", err)
	}
	for k, v := range vars {
		if v != "" && v != "off" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// KeyPair writes a cosign key pair, cosign.key and cosign.pub, into dir.
func KeyPair(t *testing.T, cosign string, env []string, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cosign, "generate-key-pair")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
}

// Make runs make release VERSION=version of platforms into registry
// (HOST:PORT/PATH) with the key in keyDir, its files in dist, more make
// variables in vars; it gives the pushed image index's digest.
func Make(t *testing.T, env []string, version, registry, dist, keyDir string, platforms []string, vars ...string) string {
	t.Helper()
	args := append([]string{"--no-print-directory", "-C", Repo(), "release", "VERSION=" + version, "REGISTRY=" + registry, "DIST=" + dist,
		"COSIGN_KEY=" + filepath.Join(keyDir, "cosign.key"), "RPMBUILDFLAGS=--nodeps", "RELEASE_PLATFORMS=" + strings.Join(platforms, " "),
		// The test's key is its own, not the project's cosign.pub; the tree
		// released is the one under test, changes and all.
		"RELEASE_KEY_PUB=", "RELEASE_DIRTY_OK=1"}, vars...)
	cmd := exec.Command("make", args...)
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("make release (%s): %s", strings.Join(platforms, " "), time.Since(start).Round(time.Second))
	digest, err := os.ReadFile(filepath.Join(dist, "image.digest"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(digest))
}
