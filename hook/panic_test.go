package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/iptables-alerter/iptables-alerter/lib/scan"
)

// TestLogPanicOneLine: a panic is one log line, with or without the
// logger; a table loader's, raised again by the look, is logged with its
// value and the stack of where it happened, not of the raise.
func TestLogPanicOneLine(t *testing.T) {
	loader := &scan.LoaderPanic{Value: "broken loader", Stack: []byte("goroutine 7 [running]:\nlib/allowlist.compile(...)\n\tcompile.go:12\n")}
	for _, tc := range []struct {
		name      string
		r         any
		panicText string
		inStack   string
	}{
		{"plain", "boom", "boom", "logPanic"},
		{"table loader", loader, "broken loader", "lib/allowlist.compile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			log := logrus.New()
			log.SetOutput(&out)
			log.SetFormatter(&logrus.JSONFormatter{})
			logPanic(&out, log, tc.r)
			var line map[string]any
			if strings.Count(out.String(), "\n") != 1 || json.Unmarshal(out.Bytes(), &line) != nil {
				t.Fatalf("not one JSON line: %q", out.String())
			}
			if line["panic"] != tc.panicText || !strings.Contains(line["stack"].(string), tc.inStack) {
				t.Errorf("panic %q, stack %q: want %q and a stack with %s", line["panic"], line["stack"], tc.panicText, tc.inStack)
			}

			out.Reset()
			logPanic(&out, nil, tc.r)
			if s := out.String(); strings.Count(s, "\n") != 1 || !strings.Contains(s, tc.panicText) || !strings.Contains(s, tc.inStack) {
				t.Errorf("without a logger: %q", s)
			}
		})
	}
}
