package child

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

func init() {
	Register("echo", func(ns *os.File, args []string) int {
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
	Register("block", func(*os.File, []string) int {
		fmt.Println("started")
		select {} // stands for a kernel call that never returns
	})
}

func TestMain(m *testing.M) {
	Main()
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
	p, err := Start("echo", open(t), time.Now().Add(5*time.Second), []string{"a", "b c"})
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
// deadline, not later, and End does not wait for it.
func TestAbandoned(t *testing.T) {
	deadline := time.Now().Add(300 * time.Millisecond)
	p, err := Start("block", open(t), deadline, nil)
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
	if late := time.Since(deadline); late > 200*time.Millisecond {
		t.Errorf("read ended %v after the deadline", late)
	}
	start := time.Now()
	p.End(false)
	if time.Since(start) > 100*time.Millisecond {
		t.Error("End waited for an abandoned child")
	}
	if fmt.Sprint(got) != "[started]" {
		t.Errorf("lines before the deadline = %q", got)
	}
}
