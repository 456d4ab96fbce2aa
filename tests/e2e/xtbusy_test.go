package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/findingstest"
	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestOCIRuntimeXTMutexHeld: while a neighbour holds the host-wide x_tables
// mutex (issue 7 item 1), a container still starts under each real runtime,
// and its finding says the legacy look was cut short. The hook's abandoned
// legacy peek outlives the hook: the runtime must not wait for it (runc
// waits for pipes it holds; crun, a subreaper, inherits it). A runtime
// that waited would run into its own hook timeout (the bundle's 10 s),
// and both fail the run then ("timeout expired for ...", "hook ran past
// specified timeout"): the run's success is the verdict. Under runc the
// neighbour holds the mutex until the run has ended. Under crun it lets go
// once the finding is written, as a real one does sooner or later: crun's
// foreground run reaps the peek it inherited before it exits, so it ends
// only then.
func TestOCIRuntimeXTMutexHeld(t *testing.T) {
	for _, rt := range []string{"crun", "runc"} {
		t.Run(rt, func(t *testing.T) {
			nstest.NeedRoot(t, rt, "unshare", "iptables-nft", "iptables-legacy-restore")
			_, err := os.Stat("/proc/self/net/ip_tables_names")
			nstest.Need(t, err == nil, "needs the ip_tables module loaded")
			needRootfs(t)
			ns := nstest.New(t)
			ns.Run("iptables-nft", "-A", "OUTPUT", "-j", "DROP")
			stop := nstest.HoldXTMutex(t)
			files := newHookFiles(t)
			if rt == "crun" {
				ended := make(chan struct{})
				t.Cleanup(func() { close(ended) })
				go func() {
					defer stop()
					for {
						if b, err := os.ReadFile(files.findings); err == nil && len(b) > 0 {
							return
						}
						select {
						case <-ended:
							return
						case <-time.After(50 * time.Millisecond):
						}
					}
				}()
			}
			p := newPod("web-"+rt, "app")
			bundle := writeBundle(t, ns.Path(), p.annotations(), files)
			start := time.Now()
			out := runContainer(t, rt, bundle, fmt.Sprintf("e2e-xt-%s-%s", rt, randHex(6)))
			t.Logf("%s run took %v (the hook's own deadline is 2 s)", rt, time.Since(start))
			if !strings.Contains(out, "alive") {
				t.Errorf("container printed %q, want it to have run", out)
			}
			recs := findingstest.Read(t, files.findings)
			if len(recs) != 1 || !recs[0].Truncated || !strings.Contains(recs[0].Error, "legacy x_tables busy") || recs[0].Nft.Rules != 1 {
				t.Fatalf("want one truncated finding with the nft rule and \"legacy x_tables busy\", got %+v\nhook log:\n%s", recs, readLog(t, files.log))
			}
		})
	}
}
