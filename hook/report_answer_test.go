//go:build !hookonly

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iptables-alerter/iptables-alerter/internal/testkit/nstest"
)

// TestReportHostileAnswer is issue 25's "report trusts a list's size" on
// the real binary against a hostile API server on loopback: one list
// answer of 330 MB (which took 1.74 GB) is refused at the answer bound,
// exit 2 naming why, and the process's peak RSS stays under 300 MB; a page
// with more items than asked for is refused, for Events and for Reports.
func TestReportHostileAnswer(t *testing.T) {
	_, err := os.Stat("/usr/bin/time")
	nstest.Need(t, err == nil, "GNU time (apt-get install time) to read report's peak RSS")
	const huge = 330 << 20
	// One Event of about 1 KiB, repeated: the list decodes, were it read.
	item := fmt.Sprintf(`{"metadata":{"name":"e","namespace":"shop"},"reason":"IPTablesUsageObserved","involvedObject":{"kind":"Pod","namespace":"shop","name":"p"},"message":%q},`,
		strings.Repeat("x", 900))
	block := []byte(strings.Repeat(item, (1<<20)/len(item)))
	list := func(w http.ResponseWriter, kind, apiVersion string, items int, each string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind":%q,"apiVersion":%q,"metadata":{},"items":[`, kind, apiVersion)
		for range items {
			if _, err := w.Write([]byte(each + ",")); err != nil {
				return
			}
		}
		fmt.Fprint(w, `{}]}`)
	}
	for _, c := range []struct {
		name, source string
		handler      http.HandlerFunc
		want         string
	}{
		{"events of 330 MB", "events", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"kind":"EventList","apiVersion":"v1","metadata":{},"items":[`)
			for sent := 0; sent < huge; sent += len(block) {
				if _, err := w.Write(block); err != nil {
					return // the reader gave up: what is asserted
				}
			}
			fmt.Fprint(w, `{}]}`)
		}, "answer over 64 MiB"},
		{"events page over its limit", "events", func(w http.ResponseWriter, r *http.Request) {
			list(w, "EventList", "v1", 100, `{"metadata":{"name":"e","namespace":"shop"}}`)
		}, "answered 101 items to a page of 100"},
		{"reports page over its limit", "reports", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/apis/openreports.io/v1alpha1" {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"openreports.io/v1alpha1","resources":[{"name":"reports","singularName":"report","namespaced":true,"kind":"Report","verbs":["get","list"]}]}`)
				return
			}
			list(w, "ReportList", "openreports.io/v1alpha1", 50, `{"metadata":{"name":"r","namespace":"shop"}}`)
		}, "answered 51 items to a page of 50"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			kc := filepath.Join(t.TempDir(), "kubeconfig")
			cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: hostile\n  cluster:\n    server: %s\ncontexts:\n- name: hostile\n  context:\n    cluster: hostile\n    user: nobody\nusers:\n- name: nobody\n  user: {}\ncurrent-context: hostile\n", srv.URL)
			if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			// GNU time forks report from its own small process and reads
			// its peak RSS: a child the test started itself would count the
			// test process's, since exec keeps the peak of the memory it
			// left (Go starts children sharing its own).
			rss := filepath.Join(t.TempDir(), "rss")
			cmd := exec.Command("/usr/bin/time", "-q", "-f", "%M", "-o", rss, bin, "report", "--kubeconfig", kc, "--source", c.source, "--timeout", "2m")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("report: %v, want exit 2; stdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			if cmd.ProcessState == nil {
				t.Fatal("report did not run")
			}
			if !strings.Contains(stderr.String(), c.want) || strings.Count(strings.TrimSpace(stderr.String()), "\n") > 0 {
				t.Errorf("stderr %q: want one line saying %q", stderr.String(), c.want)
			}
			kib, err := os.ReadFile(rss)
			if err != nil {
				t.Fatal(err)
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(kib)), 10, 64)
			if err != nil {
				t.Fatalf("GNU time wrote %q: %v", kib, err)
			}
			peak := n << 10
			t.Logf("exit 2 after %s, peak RSS %d MiB: %s", time.Since(start).Round(time.Millisecond), peak>>20, strings.TrimSpace(stderr.String()))
			if peak > 300<<20 {
				t.Errorf("peak RSS %d MiB, want under 300 MiB", peak>>20)
			}
		})
	}
}
