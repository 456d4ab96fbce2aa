package nri

import (
	"os"
	"os/exec"
	"testing"
)

// crioBinary is the CRI-O to test against: IPTA_CRIO, else crio on PATH.
func crioBinary() string {
	if p := os.Getenv("IPTA_CRIO"); p != "" {
		return p
	}
	p, _ := exec.LookPath("crio")
	return p
}

// TestCRIOMoments would run the NRI scenarios against CRI-O. CRI-O cannot
// be built on the test machines (the Go module proxy refuses it), so with
// no binary this skips even under CI=true, as the README says. With one, it
// fails: the CRI-O harness (critest starts containerd only) is still to be
// written, and a binary present must not pass silently.
func TestCRIOMoments(t *testing.T) {
	p := crioBinary()
	if p == "" {
		t.Skip("no crio binary (PATH or IPTA_CRIO): CRI-O cannot be built here; skipped even under CI=true")
	}
	t.Fatalf("crio found at %s, but tests/runtime/critest has no CRI-O harness yet: the scenarios cannot run against it", p)
}
