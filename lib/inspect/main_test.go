package inspect_test

import (
	"os"
	"testing"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
)

// TestMain lets Inspect re-execute this test binary as its legacy probe.
func TestMain(m *testing.M) {
	child.Main()
	os.Exit(m.Run())
}
