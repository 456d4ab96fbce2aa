// Package procstat splits /proc/PID/stat lines. The second field, the
// command, is the process's own to set (prctl, the binary's name): it may
// hold spaces and parentheses, so the line is cut at the last ')' and the
// fields after it are counted from there, never by splitting the whole
// line.
package procstat

import (
	"bytes"
	"errors"
	"strings"
)

// MaxFile bounds what is read of one /proc file: a stat line is a few
// hundred bytes, a cgroup file a few lines.
const MaxFile = 8 << 10

// Stat is one stat line split at its command.
type Stat struct {
	// Comm is the command, without its parentheses.
	Comm string
	// rest are fields 3 (state) onwards.
	rest []string
}

var errMalformed = errors.New("malformed stat")

// Parse splits a stat line. It fails only when the command's parentheses
// are missing; a field a caller needs may still be absent (Field).
func Parse(b []byte) (Stat, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, errMalformed
	}
	return Stat{Comm: string(b[open+1 : end]), rest: strings.Fields(string(b[end+1:]))}, nil
}

// Field is field n as proc(5) numbers them (3 the state, 4 the parent's
// pid, 16 and 17 the reaped children's user and system time, 20 the
// threads, 22 the start time, 52 the exit code), "" when the line has
// fewer fields. Fields 1 and 2 (the pid and the command) are not here.
func (s Stat) Field(n int) string {
	if i := n - 3; i >= 0 && i < len(s.rest) {
		return s.rest[i]
	}
	return ""
}

// Of splits b, "" for every field of a line Parse refuses: for callers
// that only compare a field.
func Of(b []byte) Stat {
	s, _ := Parse(b)
	return s
}
