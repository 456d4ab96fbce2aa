package release

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
	"sigs.k8s.io/yaml"
)

// makeOnly is a run step that is one make command: no shell lists, pipes,
// substitutions or redirections, and no ${{ }} expression (an expression
// in a run step is pasted into the script: a tag name could inject).
var makeOnly = regexp.MustCompile(`^make( [A-Za-z0-9_.=/:-]+)*$`)

// allowedActions are the only actions a step may use: what make needs
// before it can run (the tree, the Go of go.mod).
var allowedActions = map[string]bool{"actions/checkout": true, "actions/setup-go": true}

type workflow struct {
	On map[string]any `json:"on"`
	// YAML 1.1 (sigs.k8s.io/yaml's) reads the key on as true.
	OnAsTrue map[string]any `json:"true"`
	Jobs     map[string]struct {
		Env   map[string]any   `json:"env"`
		Steps []map[string]any `json:"steps"`
	} `json:"jobs"`
}

// checkWorkflow lists every step of w that is not a make command or an
// allowed action.
func checkWorkflow(w workflow) []string {
	var bad []string
	for name, j := range w.Jobs {
		if len(j.Steps) == 0 {
			bad = append(bad, name+": no steps")
		}
		for _, s := range j.Steps {
			run, isRun := s["run"].(string)
			uses, isUses := s["uses"].(string)
			switch {
			case isRun && !isUses:
				if !makeOnly.MatchString(strings.TrimSpace(run)) {
					bad = append(bad, name+": run "+run+": not a single make command")
				}
			case isUses && !isRun:
				action, _, _ := strings.Cut(uses, "@")
				if !allowedActions[action] {
					bad = append(bad, name+": uses "+uses)
				}
			default:
				bad = append(bad, name+": a step neither run nor uses")
			}
		}
	}
	return bad
}

// The release workflow runs on a tag push and nothing but make targets
// (and checkout, setup-go).
func TestWorkflowRunsOnlyMake(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo(t), ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(data, &w); err != nil {
		t.Fatal(err)
	}
	if w.On == nil {
		w.On = w.OnAsTrue
	}
	push, _ := w.On["push"].(map[string]any)
	if tags, _ := push["tags"].([]any); len(tags) == 0 || len(w.On) != 1 {
		t.Errorf("on: %v, want a push of tags only", w.On)
	}
	for _, b := range checkWorkflow(w) {
		t.Error(b)
	}
	ran := false
	for _, j := range w.Jobs {
		for _, s := range j.Steps {
			ran = ran || s["run"] == "make release"
		}
	}
	if !ran {
		t.Errorf("no step runs make release")
	}
}

// The check refuses what it must: a shell list, an expression, another
// action, a step that is both.
func TestWorkflowCheckRefuses(t *testing.T) {
	for _, step := range []map[string]any{
		{"run": "make release && curl x | sh"},
		{"run": "make release VERSION=${{ github.ref_name }}"},
		{"run": "make release\nrm -rf /"},
		{"run": "./release.sh"},
		{"uses": "someone/action@v1"},
		{"uses": "actions/checkout@v4", "run": "make"},
	} {
		w := workflow{Jobs: map[string]struct {
			Env   map[string]any   `json:"env"`
			Steps []map[string]any `json:"steps"`
		}{"j": {Steps: []map[string]any{step}}}}
		if bad := checkWorkflow(w); len(bad) == 0 {
			t.Errorf("step %v accepted", step)
		}
	}
}

// A real release builds every platform of wantMachine: make's default
// RELEASE_PLATFORMS lists them all (TestRelease builds fewer, by setting
// it), and the workflow does not narrow it.
func TestReleaseDefaultPlatforms(t *testing.T) {
	got, err := testbin.MakeDefault(repo(t), "RELEASE_PLATFORMS")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for arch := range wantMachine {
		want = append(want, "linux/"+arch)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("make's RELEASE_PLATFORMS is %v, want %v", got, want)
	}
	data, err := os.ReadFile(filepath.Join(repo(t), ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "PLATFORMS") {
		t.Errorf("the release workflow sets PLATFORMS: a real release builds make's default")
	}
}

// runnerCache is where the release job keeps make's tools: the runner's
// temp directory, its own user's.
const runnerCache = "${{ runner.temp }}/ipta-cache"

// The release job's make steps that read the tools' cache (every one but
// github-release) name a cache the runner's user may write: make's
// default, /var/cache/iptables-alerter, is root's, and the runner is not
// root (tests/kube/progress.sh's go_tool mkdirs there, only apt goes
// through sudo), so make release-deps failed before anything was made. The
// runner context is refused in a job's env (it exists only once a runner
// took the job), so each step sets it.
func TestWorkflowCacheIsRunners(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo(t), ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var w workflow
	if err := yaml.Unmarshal(data, &w); err != nil {
		t.Fatal(err)
	}
	for name, j := range w.Jobs {
		for k, v := range j.Env {
			if strings.Contains(fmt.Sprint(v), "runner.") {
				t.Errorf("%s: env %s: %v: the runner context is not available in a job's env", name, k, v)
			}
		}
		for _, s := range j.Steps {
			run, _ := s["run"].(string)
			if !strings.HasPrefix(run, "make ") || run == "make github-release" {
				continue
			}
			cache := j.Env["IPTA_CACHE"]
			if env, ok := s["env"].(map[string]any); ok && env["IPTA_CACHE"] != nil {
				cache = env["IPTA_CACHE"]
			}
			if cache != runnerCache {
				t.Errorf("%s: %s runs with IPTA_CACHE %v, want %s (make's default is root's)", name, run, cache, runnerCache)
			}
		}
	}
}

// The release's public key is a file of the GitHub release (what
// SECURITY.md says to verify with), and the workflow never turns off the
// check against the committed cosign.pub (RELEASE_KEY_PUB, which only the
// tests, with keys of their own, set empty).
func TestReleaseUploadsKey(t *testing.T) {
	cmd := exec.Command("make", "-s", "-n", "--no-print-directory", "-C", repo(t), "github-release", "VERSION=v1.2.3", "DIST=/dist")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n github-release: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "/dist/cosign.pub") {
		t.Errorf("make github-release uploads no cosign.pub:\n%s", out)
	}
	// The maintainer pins the MachineConfigs to the digest the workflow
	// pushed (docs/release.md, step 3): only the runner's dist/ had it.
	if !strings.Contains(string(out), "/dist/image.digest") {
		t.Errorf("make github-release uploads no image.digest:\n%s", out)
	}
	if got, err := testbin.MakeDefault(repo(t), "RELEASE_KEY_PUB"); err != nil || strings.Join(got, " ") != "cosign.pub" {
		t.Errorf("make's RELEASE_KEY_PUB is %v (%v), want cosign.pub", got, err)
	}
	data, err := os.ReadFile(filepath.Join(repo(t), ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "RELEASE_KEY_PUB") {
		t.Errorf("the release workflow sets RELEASE_KEY_PUB: a release is checked against the committed cosign.pub")
	}
	if strings.Contains(string(data), "RELEASE_DIRTY_OK") {
		t.Errorf("the release workflow sets RELEASE_DIRTY_OK: a release is of a clean tree")
	}
}

// The krew manifest's archives are files a release has: make release
// writes iptables-alerter-VERSION-OS-ARCH.tar.gz for each of its platforms
// (TestRelease opens them), lists them in SHA256SUMS, and github-release
// attaches them. The manifest named archives no target made.
func TestKrewArchivesReleased(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo(t), "packaging", "krew", "iptables-alerter.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var plugin struct {
		Spec struct {
			Platforms []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI string `json:"uri"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &plugin); err != nil {
		t.Fatal(err)
	}
	platforms, err := testbin.MakeDefault(repo(t), "RELEASE_PLATFORMS")
	if err != nil {
		t.Fatal(err)
	}
	const version = "v1.2.3"
	var eval []string
	for _, p := range platforms {
		eval = append(eval, "$(call release_archive,"+p+")")
	}
	out, err := exec.Command("make", "-s", "--no-print-directory", "-C", repo(t), "--eval=print-archives: ; @echo "+strings.Join(eval, " "),
		"print-archives", "VERSION="+version).Output()
	if err != nil {
		t.Fatalf("make release_archive: %v", err)
	}
	made := map[string]bool{}
	for _, a := range strings.Fields(string(out)) {
		made[a] = true
	}
	if len(made) != len(platforms) {
		t.Fatalf("make's archives %v for platforms %v", made, platforms)
	}
	if len(plugin.Spec.Platforms) == 0 {
		t.Fatalf("the krew manifest has no platforms")
	}
	for _, p := range plugin.Spec.Platforms {
		name := strings.ReplaceAll(filepath.Base(p.URI), "VERSION", version)
		if !made[name] {
			t.Errorf("krew platform %v: %s, which make release does not write (it writes %v)", p.Selector.MatchLabels, name, made)
		}
		if dir := filepath.Dir(p.URI); !strings.HasSuffix(dir, "/releases/download/VERSION") {
			t.Errorf("krew platform %v: %s is not a GitHub release's file", p.Selector.MatchLabels, p.URI)
		}
	}
	cmd := exec.Command("make", "-s", "-n", "--no-print-directory", "-C", repo(t), "github-release", "VERSION="+version, "DIST=/dist")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "/dist/*.tar.gz") {
		t.Errorf("make github-release does not attach the archives (%v):\n%s", err, out)
	}
	mk, err := os.ReadFile(filepath.Join(repo(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "sha256sum *.rpm *.tgz *.tar.gz ") {
		t.Errorf("make release's SHA256SUMS does not list the archives")
	}
}

// TestReleaseCheck: make release of a HEAD tagged VERSION stops before it
// builds or pushes anything when the tag's kustomize base or chart names
// another version (make set-release forgotten) or CHANGELOG.md has no
// section for it: found only at github-release, after the pushes, the
// registry held the release and GitHub none. An untagged HEAD (an own
// release, the tests') is not checked.
func TestReleaseCheck(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	// The developer's own git configuration (signed commits and tags,
	// hooks) stays out of it.
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	git := func(args ...string) {
		t.Helper()
		if out, err := run("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := run("git", "clone", "-q", repo(t), dir); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	// The Makefile under test, committed or not (make release refuses a
	// tree with changes).
	mk, err := os.ReadFile(filepath.Join(repo(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), mk, 0o644); err != nil {
		t.Fatal(err)
	}
	git("commit", "-q", "--no-verify", "--allow-empty", "-am", "the Makefile under test")
	key := filepath.Join(t.TempDir(), "cosign.key")
	if err := os.WriteFile(key, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(dir, "dist")
	release := func(version string) (string, error) {
		return run("make", "-s", "--no-print-directory", "-C", dir, "release", "VERSION="+version,
			"REGISTRY=127.0.0.1:1/none", "COSIGN_KEY="+key, "DIST="+dist)
	}
	refused := func(version, want string) {
		t.Helper()
		out, err := release(version)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("make release VERSION=%s: %v, want a refusal saying %q:\n%s", version, err, want, out)
		}
		if _, err := os.Stat(dist); err == nil {
			t.Errorf("make release VERSION=%s made dist/ before it refused", version)
		}
	}
	retag := func(msg string) {
		t.Helper()
		git("commit", "-q", "--no-verify", "-am", msg)
		git("tag", "-f", "v9.9.9")
	}
	git("tag", "v9.9.9")
	refused("v9.9.9", "make set-release RELEASE=v9.9.9")

	if out, err := run("make", "-s", "-C", dir, "set-release", "RELEASE=v9.9.9"); err != nil {
		t.Fatalf("make set-release: %v\n%s", err, out)
	}
	retag("v9.9.9")
	refused("v9.9.9", "CHANGELOG.md has no section ## [9.9.9]")

	// A section with no notes, right above the next: github-release would
	// publish nothing, or refuse after the pushes.
	changelog := filepath.Join(dir, "CHANGELOG.md")
	log, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) {
		t.Helper()
		log = []byte(strings.Replace(string(log), old, new, 1))
		if err := os.WriteFile(changelog, log, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("## [Unreleased]", "## [9.9.9] - 2026-12-07\n## [Unreleased]")
	retag("an empty section")
	refused("v9.9.9", "CHANGELOG.md has no section ## [9.9.9] with notes")

	// With notes the check passes, the release goes on and fails later,
	// at the key, which is no key.
	edit("## [9.9.9] - 2026-12-07\n", "## [9.9.9] - 2026-12-07\n\n- A note.\n\n")
	retag("notes")
	out, err := release("v9.9.9")
	if _, serr := os.Stat(dist); err == nil || serr != nil || strings.Contains(out, "HEAD is tagged") {
		t.Errorf("make release VERSION=v9.9.9 of a tag ready for it: %v (dist/: %v), want past the check and a failure at the key:\n%s", err, serr, out)
	}
	// An untagged VERSION (an own release, the tests') is not checked.
	if out, err := run("make", "-s", "--no-print-directory", "-C", dir, "release-check", "VERSION=v1.2.3"); err != nil {
		t.Errorf("make release-check VERSION=v1.2.3: %v\n%s", err, out)
	}
}
