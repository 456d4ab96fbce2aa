package render

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"unicode/utf8"
)

// MaxField caps any single attacker-controlled string in the output (a
// comment can be 256 bytes, a chain name far less; a hostile kernel object
// could claim more).
const MaxField = 256

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

// Escape returns s bare when it is a plain name (letters, digits and
// _.-:+@/,=%, not starting with '-' or '!', at most max bytes) and Quote(s,
// max) otherwise. Chain, interface and set names are nearly always plain, so
// the common text stays the one iptables-save prints, while a hostile name
// can neither break the line nor pose as an option.
func Escape(s string, max int) string {
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

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// maxHex bytes of an opaque blob are shown; longer blobs are cut and carry
// their length and an FNV-1a hash so different blobs stay different.
const maxHex = 64

// blob renders bytes for an opaque token: "[hex]" or "[hex...+N#hash]".
func blob(data []byte) string {
	if len(data) <= maxHex {
		return "[" + hex.EncodeToString(data) + "]"
	}
	h := fnv.New32a()
	h.Write(data)
	return fmt.Sprintf("[%s...+%d#%08x]", hex.EncodeToString(data[:maxHex]), len(data)-maxHex, h.Sum32())
}

// opaque is the token for anything not decoded: "-m unknown:KIND/NAME[hex]".
func opaque(kind, name string, data []byte) string {
	flag := "-m"
	if kind == "target" {
		flag = "-j"
	}
	return flag + " unknown:" + kind + "/" + Escape(name, 64) + blob(data)
}
