package render

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	mb := strings.Repeat("A", 1<<20)
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"plain chain", "KUBE-SVC-ABC_1.2", 256, "KUBE-SVC-ABC_1.2"},
		{"empty", "", 256, `""`},
		{"space", "a b", 256, `"a b"`},
		{"newline", "a\n-j ACCEPT", 256, `"a\n-j ACCEPT"`},
		{"quote and backslash", `a"b\c`, 256, `"a\"b\\c"`},
		{"nul", "a\x00b", 256, `"a\x00b"`},
		{"invalid utf8", "a\xff\xfe", 256, `"a\xff\xfe"`},
		{"non-ascii", "é\u202e", 256, `"\u00e9\u202e"`},
		{"looks like option", "-j", 256, `"-j"`},
		{"looks like negation", "!x", 256, `"!x"`},
		{"too long", "abcdef", 4, `"abcd"...+2`},
		{"cut before split rune", "abcé", 4, `"abc"...+2`},
		{"1 MB", mb, 256, `"` + mb[:256] + `"...+` + "1048320"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Escape(tc.in, tc.max)
			if got != tc.want {
				t.Errorf("Escape(%.40q, %d) = %.300q, want %.300q", tc.in, tc.max, got, tc.want)
			}
			for _, c := range []byte(got) {
				if c < 0x20 || c > 0x7e {
					t.Fatalf("output holds byte %#x", c)
				}
			}
			if len(got) > 4*tc.max+32 {
				t.Errorf("output of %d bytes is not bounded by max %d", len(got), tc.max)
			}
		})
	}
}

func TestQuoteHostile(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"all bytes", func() string {
			var b []byte
			for i := 0; i < 256; i++ {
				b = append(b, byte(i))
			}
			return string(b)
		}()},
		{"1 MB of newlines", strings.Repeat("\n", 1<<20)},
		{"1 MB of runes", strings.Repeat("日", 1<<20)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Quote(tc.in, MaxField)
			if !utf8.ValidString(got) || strings.ContainsAny(got, "\n\r\x00") {
				t.Fatalf("unsafe output %.80q", got)
			}
			// Every input byte escapes to at most 4 ("\xff"), runes to 6.
			if len(got) > 6*MaxField+32 {
				t.Errorf("output is %d bytes", len(got))
			}
			if len(tc.in) > MaxField && !strings.Contains(got, `"...+`) {
				t.Errorf("cut not marked: %.80q", got)
			}
		})
	}
}
