package procstat

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

func TestParseHostileCommand(t *testing.T) {
	// A command may hold ") R 1 " to pass for the fields after it.
	// Fields 23 to 51 are zeros, 52 (the exit code) is 9.
	line := []byte("4242 (a) R 1 (b) S 77 4242 0 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 3 0 991" +
		strings.Repeat(" 0", 51-22) + " 9\n")
	s, err := Parse(line)
	if err != nil {
		t.Fatal(err)
	}
	if s.Comm != "a) R 1 (b" {
		t.Errorf("command %q", s.Comm)
	}
	for n, want := range map[int]string{3: "S", 4: "77", 16: "7", 17: "8", 20: "3", 22: "991", 52: "9", 53: "", 2: "", 0: ""} {
		if got := s.Field(n); got != want {
			t.Errorf("field %d = %q, want %q", n, got, want)
		}
	}
}

func TestParseRefusesLineWithoutCommand(t *testing.T) {
	for _, b := range []string{"", "4242 a R 1", "4242 )a( R 1"} {
		if _, err := Parse([]byte(b)); err == nil {
			t.Errorf("%q parsed", b)
		}
		if f := Of([]byte(b)).Field(3); f != "" {
			t.Errorf("%q: field 3 %q", b, f)
		}
	}
}

// The kernel's own line for this thread: its process's parent and start
// time where proc(5) puts them. The thread's own line, on a locked
// thread: the main thread's state is whatever that thread does meanwhile.
func TestParseOwnStat(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := os.ReadFile("/proc/thread-self/stat")
	if err != nil {
		t.Skip(err)
	}
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Field(4), strconv.Itoa(os.Getppid()); got != want {
		t.Errorf("parent %s, want %s", got, want)
	}
	if s.Field(3) != "R" {
		t.Errorf("state %q, want R (reading its own stat)", s.Field(3))
	}
	if s.Field(22) == "" || s.Field(52) == "" {
		t.Errorf("line too short: %s", fmt.Sprint(len(s.rest)))
	}
}
