package child

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// echo answers its arguments, one a line, after checking fd 3.
var echo = NewProbe("echo", func(ns *os.File, args []string) int {
	// fd 3 must be a namespace: the child reads it.
	if _, err := netns.FromFile(ns, "fd 3"); err != nil {
		fmt.Println("! " + err.Error())
		return 0
	}
	for _, a := range args {
		fmt.Println(a)
	}
	return 0
})

// block stands for a kernel call that never returns.
var block = NewProbe("block", func(*os.File, []string) int {
	fmt.Println("started")
	select {}
})

// unlisted is a probe this binary's TestMain leaves out.
var unlisted = NewProbe("unlisted", func(*os.File, []string) int { return 0 })

func TestMain(m *testing.M) {
	Main(echo, block)
	os.Exit(m.Run())
}

func open(t *testing.T) *netns.Handle {
	h, err := netns.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestAnswered: the child's lines arrive in order, it is reaped by End.
func TestAnswered(t *testing.T) {
	if !Wired() {
		t.Fatal("Main did not wire the binary")
	}
	p, err := Start(echo, open(t), time.Now().Add(5*time.Second), []string{"a", "b c"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for p.Lines.Scan() {
		got = append(got, p.Lines.Text())
	}
	p.End(true)
	if fmt.Sprint(got) != "[a b c]" {
		t.Errorf("lines = %q", got)
	}
	if p.cmd.ProcessState == nil {
		t.Error("answered child not reaped by End")
	}
}

// TestAbandoned: a child blocked past the deadline ends the read at the
// deadline, not later, and End does not wait for it. The deadline leaves
// a loaded machine time to start the child.
func TestAbandoned(t *testing.T) {
	deadline := time.Now().Add(2 * time.Second)
	p, err := Start(block, open(t), deadline, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for p.Lines.Scan() {
		got = append(got, p.Lines.Text())
	}
	if !errors.Is(p.Lines.Err(), os.ErrDeadlineExceeded) {
		t.Errorf("read ended with %v, want the deadline", p.Lines.Err())
	}
	// The child blocks for good: the margins are a loaded machine's.
	if late := time.Since(deadline); late > 2*time.Second {
		t.Errorf("read ended %v after the deadline", late)
	}
	start := time.Now()
	p.End(false)
	if time.Since(start) > 2*time.Second {
		t.Error("End waited for an abandoned child")
	}
	if fmt.Sprint(got) != "[started]" {
		t.Errorf("lines before the deadline = %q", got)
	}
}

// TestUnlisted: a probe main did not list, or a made-up one, is refused
// before any process starts, with an error the caller can tell.
func TestUnlisted(t *testing.T) {
	h := open(t)
	for _, p := range []*Probe{unlisted, NewProbe("echo", nil), nil} {
		proc, err := Start(p, h, time.Now().Add(time.Second), nil)
		if !errors.Is(err, ErrUnlisted) {
			t.Errorf("Start(%v) = %v, want ErrUnlisted", p, err)
		}
		if proc != nil {
			proc.End(false)
		}
	}
}

// TestClash: of two probes sharing a name, neither starts, since the child
// could not tell which one to run.
func TestClash(t *testing.T) {
	Main(echo, block, NewProbe("block", nil))
	defer Main(echo, block)
	if _, err := Start(block, open(t), time.Now().Add(time.Second), nil); !errors.Is(err, ErrUnlisted) {
		t.Errorf("Start(block) with a clash = %v, want ErrUnlisted", err)
	}
}
