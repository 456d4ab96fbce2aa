package safetext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestName(t *testing.T) {
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
			got := Name(tc.in, tc.max)
			if got != tc.want {
				t.Errorf("Name(%.40q, %d) = %.300q, want %.300q", tc.in, tc.max, got, tc.want)
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
			got := Quote(tc.in, maxField)
			if !utf8.ValidString(got) || strings.ContainsAny(got, "\n\r\x00") {
				t.Fatalf("unsafe output %.80q", got)
			}
			// Every input byte escapes to at most 4 ("\xff"), runes to 6.
			if len(got) > 6*maxField+32 {
				t.Errorf("output is %d bytes", len(got))
			}
			if len(tc.in) > maxField && !strings.Contains(got, `"...+`) {
				t.Errorf("cut not marked: %.80q", got)
			}
		})
	}
}

// maxField is what render uses for one field.
const maxField = 256

func TestDisplay(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{name: "plain", in: "-A INPUT -j DROP", want: "-A INPUT -j DROP"},
		{name: "newline", in: "a\nb", want: `a\x0ab`},
		{name: "escape seq", in: "\x1b[2J", want: `\x1b[2J`},
		{name: "invalid utf8", in: "a\xffb", want: `a\xffb`},
		{name: "bidi override", in: "x\u202ey", want: `x\u202ey`},
		{name: "line separator", in: "x\u2028y", want: `x\u2028y`},
		{name: "c1 control", in: "x\u0085y", want: `x\u0085y`},
		{name: "multibyte kept", in: "größe", want: "größe"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Display(tc.in)); diff != "" {
				t.Errorf("Display(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestCut(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		limit int
		want  string
	}{
		{name: "fits", in: "abc", limit: 3, want: "abc"},
		{name: "ascii cut", in: "abcdefgh", limit: 6, want: "abc..."},
		{name: "never splits a rune", in: "aéééé", limit: 7, want: "aé..."},
		{name: "tiny limit", in: "abcdef", limit: 2, want: ".."},
		{name: "negative limit", in: "abcdef", limit: -1, want: ""},
		{name: "invalid utf8 made valid", in: "a\xffb", limit: 10, want: "a\uFFFDb"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Cut(tc.in, tc.limit)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Cut (-want +got):\n%s", diff)
			}
			if !utf8.ValidString(got) || len(got) > max(tc.limit, 0) {
				t.Errorf("Cut(%q, %d) = %q: invalid UTF-8 or too long", tc.in, tc.limit, got)
			}
		})
	}
}

// JSON escapes what encoding/json leaves raw and a terminal would act on,
// and the text still decodes to the same value.
func TestJSON(t *testing.T) {
	in := "a\u009b31m\u202ez\u2066\ufeff\u2028é\x1b<>&\U0001F600"
	raw, err := json.Marshal(map[string]string{"k": in})
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(raw)
	want := `{"k":"a\u009b31m\u202ez\u2066\ufeff\u2028é\u001b\u003c\u003e\u0026` + "\U0001F600" + `"}`
	if string(got) != want {
		t.Errorf("JSON(%s) = %s, want %s", raw, got, want)
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["k"] != in {
		t.Errorf("decodes to %q, %v; want %q", back["k"], err, in)
	}
}
