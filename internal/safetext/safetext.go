// Package safetext is the one place that makes an attacker-chosen string
// (a chain, table or set name, a comment, a pod name, a whole rule) safe to
// show and bounded in size. Each function is one meaning:
//
//   - Quote: a Go-quoted string of printable ASCII, cut to max bytes with the
//     count of bytes left out ("...+N"), for fields that must survive any
//     log line, JSON field or terminal and stay distinct when cut.
//   - Name: a name as iptables-save prints it when it is plain, Quote
//     otherwise, so a hostile name can neither break a line nor pose as an
//     option.
//   - Display: the text as a person reads it (Unicode kept), with every
//     byte that could forge a line or reorder what is read escaped.
//   - Cut: valid UTF-8 of at most limit bytes, the cut marked with "...".
//   - JSON: JSON text with the runes Display escapes that encoding/json
//     leaves raw escaped too, so the same values reach a terminal inert.
//
// Invariant: none of them panics on any input, and the output of Quote and
// Name is printable ASCII.
package safetext

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// cutMark follows a quoted string that was cut: the count of bytes left out
// keeps two long strings with a common prefix apart in the text.
func cutMark(n int) string { return "...+" + strconv.Itoa(n) }

// Quote always quotes s Go-style with only printable ASCII inside: control
// characters, quotes, backslashes, invalid UTF-8 and every non-ASCII rune are
// escaped, so the result can go into a log line, a JSON field or a terminal
// without surprises. When s is longer than max bytes, only its first max
// bytes (backed up to a rune start) are quoted and cutMark follows.
func Quote(s string, max int) string {
	if max < 0 {
		max = 0
	}
	if len(s) <= max {
		return strconv.QuoteToASCII(s)
	}
	cut := max
	// Back up at most 3 bytes so a valid rune is not split into \x escapes.
	for i := 0; i < 3 && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = max
	}
	return strconv.QuoteToASCII(s[:cut]) + cutMark(len(s)-cut)
}

// Name returns s bare when it is a plain name (letters, digits and
// _.-:+@/,=%, not starting with '-' or '!', at most max bytes) and Quote(s,
// max) otherwise. Chain, interface and set names are nearly always plain, so
// the common text stays the one iptables-save prints.
func Name(s string, max int) string {
	if s != "" && len(s) <= max && s[0] != '-' && s[0] != '!' {
		plain := true
		for i := 0; i < len(s) && plain; i++ {
			plain = isPlain(s[i])
		}
		if plain {
			return s
		}
	}
	return Quote(s, max)
}

func isPlain(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '_', '.', '-', ':', '+', '@', '/', ',', '=', '%':
		return true
	}
	return false
}

// Display makes text safe to show to a person: invalid UTF-8 bytes,
// control characters, bidi controls and line separators are written as Go
// escapes, so a rule cannot forge lines or reorder what the admin reads;
// every other rune is kept as it is.
func Display(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			fmt.Fprintf(&b, `\x%02x`, r)
		case hides(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// hides reports whether a rune at or above U+0080 can change what a
// person reads beyond itself: a C1 control (a terminal may take U+009B for
// CSI), a bidi control, a line or paragraph separator, a byte order mark.
// All are in the Basic Multilingual Plane, so \uXXXX writes each.
func hides(r rune) bool {
	return r >= 0x80 && (unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) ||
		unicode.In(r, unicode.Zl, unicode.Zp) || r == '\ufeff')
}

// JSON escapes, in JSON text that encoding/json wrote, each rune hides
// names as \uXXXX; encoding/json escapes C0 controls itself but leaves
// these raw. Such runes occur only inside strings there, so the text
// decodes to the same values; a terminal that shows it gets no control.
func JSON(text []byte) []byte {
	var b bytes.Buffer
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRune(text[i:])
		if hides(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.Write(text[i : i+size])
		}
		i += size
	}
	return b.Bytes()
}

// Ellipsis marks a Cut; ASCII so that it never needs more room than counted.
const Ellipsis = "..."

// Cut returns s as valid UTF-8 (invalid bytes become U+FFFD) of at most
// limit bytes, cut on a rune boundary and ending in Ellipsis when cut.
func Cut(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	if limit <= len(Ellipsis) {
		return Ellipsis[:max(limit, 0)]
	}
	cut := limit - len(Ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis
}
