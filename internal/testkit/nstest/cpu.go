package nstest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// MeterCPU starts counting the process's CPU, every thread's, user and
// system; the function it returns reports it per op as cpu-ns/op. Wake-ups
// of other threads (a hand-over between goroutines, the runtime's own) are
// in it, where the time per op leaves them out.
func MeterCPU(b *testing.B) func() {
	var before unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	return func() {
		var after unix.Rusage
		unix.Getrusage(unix.RUSAGE_SELF, &after)
		cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
		b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	}
}
