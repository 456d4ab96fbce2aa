//go:build !hookonly

package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestAgentFlags: --help names the interface the DaemonSet and the systemd
// unit use, and a bad plugin index is a configuration error (exit 2), not
// something to retry.
func TestAgentFlags(t *testing.T) {
	var stderr bytes.Buffer
	if code := runAgent([]string{"--help"}, nil, &stderr); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, f := range []string{"-nri-socket", "-findings", "-state-dir", "-allowlist", "-health-addr", "-node", "-plugin-index"} {
		if !strings.Contains(stderr.String(), f) {
			t.Errorf("--help does not list %s", f)
		}
	}
	stderr.Reset()
	if code := runAgent([]string{"--plugin-index", "x", "--health-addr", ""}, nil, &stderr); code != 2 {
		t.Errorf("bad plugin index: exit %d, want 2 (%s)", code, stderr.String())
	}
}
