package inspect_test

import (
	"os"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
)

// TestMain lets Inspect re-execute this test binary as its legacy probe.
func TestMain(m *testing.M) {
	child.Main(inspect.LegacyProbe)
	os.Exit(m.Run())
}
