package openreports

import (
	"testing"
	"time"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
)

// SetMaxKnownBytes bounds what a Writer's remembered Reports hold, for
// the rest of t.
func SetMaxKnownBytes(t *testing.T, n int) {
	old := maxKnownBytes
	maxKnownBytes = n
	t.Cleanup(func() { maxKnownBytes = old })
}

// Known gives how many Reports w remembers and their footprint.
func (w *Writer) Known() (reports, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.known), w.knownBytes
}

// Footprint is footprint, the estimate Known counts.
func Footprint(r *openreportsv1alpha1.Report) int { return footprint(r) }

// SetNow gives w the clock now.
func (w *Writer) SetNow(now func() time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = now
}
