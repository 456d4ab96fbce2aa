package nstest

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// PinProcess runs every thread of the test process (and the threads it
// makes later: they inherit it) on CPU 0 until the test ends, when each
// gets back the mask it had. With a writer pinned there too (taskset -c 0),
// which of the two runs first is the scheduler's priority order, not the
// machine's load: a test of what a real-time thread sees of a writer that
// exits at once depends on no timing.
//
// GOMAXPROCS is held where it was while pinned. Go's runtime follows the
// affinity mask: about a second after the pin it would drop to 1, and a
// real-time thread back from a blocking syscall would then wait for the one
// P, held by a goroutine on an ordinary thread, while the writer ran on and
// exited (seen with a small program pinned as this pins: GOMAXPROCS 2, then
// 1 from the first second on).
func PinProcess(t testing.TB) {
	t.Helper()
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var one unix.CPUSet
	one.Set(0)
	saved := map[int]unix.CPUSet{}
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var was unix.CPUSet
		if unix.SchedGetaffinity(tid, &was) != nil {
			continue // ended meanwhile
		}
		if err := unix.SchedSetaffinity(tid, &one); err != nil {
			continue
		}
		saved[tid] = was
	}
	t.Cleanup(func() {
		ents, _ := os.ReadDir("/proc/self/task")
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			was, ok := saved[tid]
			if !ok {
				// Made while pinned: the first thread's mask.
				for _, m := range saved {
					was, ok = m, true
					break
				}
			}
			if ok {
				_ = unix.SchedSetaffinity(tid, &was)
			}
		}
		// Back to the runtime's own choice, which follows the mask again.
		runtime.SetDefaultGOMAXPROCS()
	})
}
