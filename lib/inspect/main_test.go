package inspect_test

import (
	"os"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// TestMain lets Inspect re-execute this test binary as its legacy probe.
func TestMain(m *testing.M) {
	inspect.ProbeMain()
	os.Exit(m.Run())
}
