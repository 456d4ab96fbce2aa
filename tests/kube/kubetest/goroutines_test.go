package kubetest

import (
	"strings"
	"testing"
)

// TestGoroutines checks what a failed test logs of its API server: the
// goroutine profile, read with the admin token, and bounded.
func TestGoroutines(t *testing.T) {
	c := Start(t)
	got := c.goroutines()
	status, dump, _ := strings.Cut(got, "\n")
	if status != "200 OK" || !strings.HasPrefix(dump, "goroutine profile: total ") {
		t.Fatalf("goroutines() = %.300q, want the 200 of a goroutine profile", got)
	}
	if len(dump) > maxGoroutineDump {
		t.Errorf("goroutines() gave %d bytes of profile, more than the bound %d", len(dump), maxGoroutineDump)
	}
	// What a request waiting on storage would show.
	if !strings.Contains(dump, "k8s.io/apiserver/") {
		t.Errorf("goroutines() holds no stack of k8s.io/apiserver:\n%.2000s", dump)
	}
}
