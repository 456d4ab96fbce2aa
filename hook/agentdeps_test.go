//go:build !hookonly

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/testbin"
)

// TestAgentOnlyLinks: the agent-only build, which every node runs, links
// neither grpc-go nor k8s.io/cri-api (lib/cri speaks the CRI fallback's two
// calls itself), and reaches no template's reflection, which would keep
// every exported method in the binary: about 5.7 MB of its file and 4 MB
// of its idle RSS (docs/performance.md).
func TestAgentOnlyLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("links the agent-only build")
	}
	out, err := exec.Command(testbin.GoTool(), "list", "-deps", "-tags", "agentonly", testbin.Package).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		switch {
		case p == "google.golang.org/grpc", strings.HasPrefix(p, "k8s.io/cri-api/"), p == "golang.org/x/net/trace", p == "html/template":
			t.Errorf("the agent-only build links %s", p)
		}
	}
	// The linker's reachability graph: text/template is linked (cobra
	// imports it), and must stay unreached.
	bin := filepath.Join(t.TempDir(), "agent")
	dep, err := testbin.GoBuild("-tags", "agentonly", "-ldflags=-dumpdep", "-o", bin, testbin.Package).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%.2000s", err, dep)
	}
	if i := strings.Index(string(dep), "-> text/template.(*Template).Execute"); i >= 0 {
		line := string(dep)[strings.LastIndex(string(dep[:i]), "\n")+1 : i]
		t.Errorf("the agent-only build reaches text/template's Execute (from %s)", line)
	}
}
