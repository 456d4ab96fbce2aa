package report

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// scanner reads one JSON document from a stream token by token, for a
// reader that keeps a few fields of a large answer: a list page of Reports
// is some 15 MB of which the report keeps a few hundred bytes a result.
// encoding/json decodes every value it is given into something, and its
// Decoder copies each value out of its buffer before decoding it; here a
// value not asked for is only stepped over (its structure checked: strings
// closed, brackets matched, literals and numbers valid), and a string asked
// for is returned as the bytes in the buffer when it holds no escape, no
// control byte and no byte over 0x7f, else decoded by encoding/json itself.
type scanner struct {
	r   io.Reader
	buf []byte
	// i is the next byte to read in buf[:n]; mark, when >= 0, is the
	// first byte of a value being read that fill must keep.
	i, n, mark int
	// read counts the bytes before buf, max bounds them (0: none).
	read, max int64
	err       error
	// str is a decoded string that held escapes: the last one only.
	str []byte
}

// maxDepth bounds nesting, as encoding/json's does.
const maxDepth = 10000

func newScanner(r io.Reader, max int64) *scanner {
	return &scanner{r: r, buf: make([]byte, 64<<10), mark: -1, max: max}
}

// fill reads more bytes, keeping buf[min(i, mark):]; false when none
// came (s.err says why).
func (s *scanner) fill() bool {
	keep := s.i
	if s.mark >= 0 && s.mark < keep {
		keep = s.mark
	}
	if keep > 0 {
		copy(s.buf, s.buf[keep:s.n])
		s.n, s.i, s.read = s.n-keep, s.i-keep, s.read+int64(keep)
		if s.mark >= 0 {
			s.mark -= keep
		}
	}
	if s.n == len(s.buf) {
		// One value longer than the buffer, kept whole.
		s.buf = append(s.buf, make([]byte, len(s.buf))...)
	}
	for tries := 0; s.err == nil && tries < 100; tries++ {
		m, err := s.r.Read(s.buf[s.n:])
		s.n += m
		if s.max > 0 && s.read+int64(s.n) > s.max {
			s.err = ErrAnswerTooLarge
			return false
		}
		if err != nil {
			s.err = err
		}
		if m > 0 {
			return true
		}
	}
	if s.err == nil {
		s.err = io.ErrNoProgress
	}
	return false
}

// fail is the error of a scan that cannot go on at the current byte.
func (s *scanner) fail(want string) error {
	if s.err != nil && !errors.Is(s.err, io.EOF) {
		// The read stopped: that is why.
		return s.err
	}
	if s.i >= s.n {
		return fmt.Errorf("cut short at byte %d, where %s was due", s.read+int64(s.i), want)
	}
	return fmt.Errorf("%q at byte %d, where %s was due", s.buf[s.i], s.read+int64(s.i), want)
}

// peek skips white space and gives the next byte, 0 at the end.
func (s *scanner) peek() byte {
	for {
		for s.i < s.n {
			switch c := s.buf[s.i]; c {
			case ' ', '\t', '\n', '\r':
				s.i++
			default:
				return c
			}
		}
		if !s.fill() {
			return 0
		}
	}
}

// expect reads byte c, after white space.
func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.fail(fmt.Sprintf("%q", c))
	}
	s.i++
	return nil
}

// null reads a null when one is next.
func (s *scanner) null() (bool, error) {
	if s.peek() != 'n' {
		return false, nil
	}
	return true, s.literal()
}

// open reads the '{' or '[' (c) of a value, or a null (false).
func (s *scanner) open(c byte) (bool, error) {
	if null, err := s.null(); null || err != nil {
		return false, err
	}
	return true, s.expect(c)
}

// next tells whether the object or array being read (closed by c) has
// one more member, reading the comma before it; first is true before
// the first one.
func (s *scanner) next(c byte, first *bool) (bool, error) {
	if s.peek() == c {
		s.i++
		return false, nil
	}
	if !*first {
		if err := s.expect(','); err != nil {
			return false, err
		}
	}
	*first = false
	return true, nil
}

// members reads the members of the object just opened, to its '}': fn
// reads each one's value, given its key (valid until the next read).
// Every reader of an object goes through it, so that the commas, keys and
// end are read in one place.
func (s *scanner) members(fn func(key []byte) error) error {
	for first := true; ; {
		more, err := s.next('}', &first)
		if err != nil || !more {
			return err
		}
		key, err := s.key()
		if err != nil {
			return err
		}
		if err := fn(key); err != nil {
			return err
		}
	}
}

// object reads an object's members with fn; a null has none.
func (s *scanner) object(fn func(key []byte) error) error {
	ok, err := s.open('{')
	if !ok || err != nil {
		return err
	}
	return s.members(fn)
}

// key reads an object's key and its colon: the key's bytes are valid
// until the next read.
func (s *scanner) key() ([]byte, error) {
	if s.peek() != '"' {
		return nil, s.fail("a key")
	}
	k, err := s.stringValue()
	if err != nil {
		return nil, err
	}
	// The colon may need a fill, which moves the key's bytes: it is kept.
	s.str = append(s.str[:0], k...)
	return s.str, s.expect(':')
}

// stringValue reads the string that starts next; the bytes are valid
// until the next read.
func (s *scanner) stringValue() ([]byte, error) {
	s.mark = s.i // the quote, kept for encoding/json
	s.i++
	defer func() { s.mark = -1 }()
	end, err := s.stringEnd()
	if err != nil {
		return nil, err
	}
	raw := s.buf[s.mark+1 : end]
	s.i = end + 1
	if !plain(raw) {
		// What encoding/json makes of it, or its error.
		var v string
		if err := json.Unmarshal(s.buf[s.mark:end+1], &v); err != nil {
			return nil, fmt.Errorf("string at byte %d: %w", s.read+int64(s.mark), err)
		}
		return append(s.str[:0], v...), nil
	}
	return raw, nil
}

// plain: b holds no control byte, no byte over 0x7f and no backslash, so
// it is the string's value as it stands. Eight bytes at a time: a byte
// under 0x20, or over 0x7f, or a backslash, sets its top bit in bad.
func plain(b []byte) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		bs := w ^ (ones * '\\')
		bad := (w - ones*0x20) | w | (bs-ones)&^bs
		if bad&tops != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 || c >= utf8.RuneSelf || c == '\\' {
			return false
		}
	}
	return true
}

// stringEnd finds the closing quote of the string whose bytes start at
// s.i (s.mark set to keep them, or -1 to let them go), leaving s.i there.
// A quote ends it unless an odd run of backslashes comes before it. A run
// that reaches the end of what was read is carried as a count into the
// next fill, not scanned again: a string of megabytes of backslashes
// (a hostile API server's) costs one pass.
func (s *scanner) stringEnd() (int, error) {
	carry := 0 // backslashes just before s.i, scanned already
	for {
		q := bytes.IndexByte(s.buf[s.i:s.n], '"')
		if q < 0 {
			run := 0
			for run < s.n-s.i && s.buf[s.n-1-run] == '\\' {
				run++
			}
			if run == s.n-s.i {
				carry += run
			} else {
				carry = run
			}
			s.i = s.n
			if !s.fill() {
				return 0, s.fail("a closing quote")
			}
			continue
		}
		q += s.i
		run := 0
		for q-1-run >= s.i && s.buf[q-1-run] == '\\' {
			run++
		}
		if q-run == s.i {
			run += carry
		}
		if run%2 == 0 {
			s.i = q
			return q, nil
		}
		s.i, carry = q+1, 0
	}
}

// str reads a string or null (""): the bytes are valid until the next
// read.
func (s *scanner) strOrNull() ([]byte, error) {
	switch s.peek() {
	case '"':
		return s.stringValue()
	case 'n':
		return nil, s.literal()
	}
	return nil, s.fail("a string")
}

// literal reads a number, true, false or null, checked as encoding/json
// checks it.
func (s *scanner) literal() error {
	s.mark = s.i
	defer func() { s.mark = -1 }()
	for {
		for s.i < s.n {
			switch c := s.buf[s.i]; {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'E':
				s.i++
				continue
			}
			goto end
		}
		if !s.fill() {
			break
		}
	}
end:
	if s.i == s.mark || !json.Valid(s.buf[s.mark:s.i]) {
		return fmt.Errorf("%q at byte %d: not a JSON value", s.buf[s.mark:s.i], s.read+int64(s.mark))
	}
	return nil
}

// skip steps over the value that comes next.
func (s *scanner) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested over %d deep at byte %d", maxDepth, s.read+int64(s.i))
	}
	switch c := s.peek(); c {
	case '"':
		s.i++
		_, err := s.stringEnd()
		s.i++
		return err
	case '{':
		s.i++
		return s.members(func([]byte) error { return s.skip(depth + 1) })
	case '[':
		s.i++
		for first := true; ; {
			more, err := s.next(']', &first)
			if err != nil || !more {
				return err
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
		}
	case 0:
		return s.fail("a value")
	}
	return s.literal()
}

// end checks nothing but white space follows the document.
func (s *scanner) end() error {
	if s.peek(); s.i < s.n {
		return s.fail("the end")
	}
	if s.err != nil && !errors.Is(s.err, io.EOF) {
		return s.err
	}
	return nil
}
