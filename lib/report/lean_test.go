package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

// leanOf is what report reads of x, by encoding/json's typed Report and a
// map lookup per property: what pageReader must give.
func leanOf(x openreportsv1alpha1.ReportResult) leanResult {
	l := leanResult{Ours: x.Source == openreports.Source, Rule: x.Rule, Errored: x.Result == "error"}
	if s, ok := openreports.PodSubject(x); ok {
		l.Pod, l.HasPod = leanSubject{Name: s.Name, UID: string(s.UID)}, true
	}
	p := x.Properties
	l.Props = leanProps{Cut: p["cut"], Nodes: p[openreports.PropNodes], Truncated: p[openreports.PropTruncated], Mixed: p[openreports.PropMixedBackends],
		Modules: p[openreports.PropModules], PodUID: p[openreports.PropPodUID], Owner: p[openreports.PropOwner], Error: p[openreports.PropError],
		Rules: p[openreports.PropRules], Writer: p[openreports.PropWriter], Command: p[openreports.PropCommand], Vendor: p[openreports.PropVendor], Hint: p[openreports.PropHint],
		Doc: p[openreports.PropDoc], Seen: openreports.Seen(x)}
	for i := range l.Props.Examples {
		l.Props.Examples[i], l.Props.HasExample[i] = p[openreports.PropExample+strconv.Itoa(i+1)]
	}
	return l
}

// A page of odd Reports (escapes, non-ASCII, invalid UTF-8, nulls, values
// of every type where they are not read, keys of other case, indented or
// not), read one byte at a time or whole, decodes as encoding/json decodes
// it; every page cut short is an error, never a panic or a page read.
func TestPageReaderAsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewSource(30))
	odd := []string{"", "plain", `quo"te`, `back\slash`, "tab\tnew\nline", "ünïcödé ✓", "\u2028sep", "ctl\x01", "emoji 😀", strings.Repeat("long ", 200),
		"Deployment/web", "legacy=1 xt=2 native=3 total=6", "[ip nat, xt] -A OUTPUT -j REDIRECT", "2026-03-01T12:00:00Z", "not a time", "true"}
	pick := func() string { return odd[rng.Intn(len(odd))] }
	keys := []string{"cut", openreports.PropNodes, openreports.PropTruncated, openreports.PropMixedBackends, openreports.PropModules, openreports.PropPodUID,
		openreports.PropOwner, openreports.PropError, openreports.PropRules, openreports.PropWriter, openreports.PropCommand, openreports.PropVendor, openreports.PropHint,
		openreports.PropDoc, openreports.PropLastSeen, "example1", "example2", "example3", "example4", "example0", "example01", "example+1", "other", "Owner"}
	for round := 0; round < 40; round++ {
		var list openreportsv1alpha1.ReportList
		for r := 0; r < 1+rng.Intn(4); r++ {
			rep := openreportsv1alpha1.Report{}
			rep.Namespace, rep.Name = pick(), fmt.Sprintf("r%d", r)
			rep.Labels = map[string]string{"a": pick()}
			for n := 0; n < rng.Intn(5); n++ {
				x := openreportsv1alpha1.ReportResult{Source: []string{openreports.Source, "kyverno", pick()}[rng.Intn(3)],
					Rule:   []string{findings.ImpactLegacy, openreports.CutRule, openreports.RuleUnknown, pick()}[rng.Intn(4)],
					Result: []openreportsv1alpha1.Result{"fail", "error", "skip"}[rng.Intn(3)], Description: pick(), Scored: true}
				for s := 0; s < rng.Intn(3); s++ {
					x.Subjects = append(x.Subjects, corev1.ObjectReference{APIVersion: []string{"", "v1", "apps/v1"}[rng.Intn(3)],
						Kind: []string{"Pod", "Deployment"}[rng.Intn(2)], Name: pick(), UID: types.UID("u-" + strconv.Itoa(s))})
				}
				if rng.Intn(4) > 0 {
					x.Properties = map[string]string{}
					for k := 0; k < rng.Intn(12); k++ {
						x.Properties[keys[rng.Intn(len(keys))]] = pick()
					}
				}
				rep.Results = append(rep.Results, x)
			}
			list.Items = append(list.Items, rep)
		}
		list.Continue = pick()
		data, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		// What the API server may send beside: nulls, other types, \u
		// escapes in keys, raw non-ASCII and invalid UTF-8.
		data = bytes.Replace(data, []byte(`"kind":"`), []byte(`"extra":[1,-2.5e3,true,false,null,{"a":[{}]}],"kind":"`), 1)
		data = bytes.ReplaceAll(data, []byte(`"scored":true`), []byte(`"scored":true,"resources2":null,"n":-0.1E+2`))
		data = bytes.ReplaceAll(data, []byte(`"source":`), []byte(`"\u0073ource":`))
		data = bytes.ReplaceAll(data, []byte(`\u2028`), []byte("\u2028"))
		data = bytes.ReplaceAll(data, []byte(`long long`), []byte("long \xff\xfe long"))
		if round%2 == 1 {
			var b bytes.Buffer
			json.Indent(&b, data, "", "  ")
			data = b.Bytes()
		}
		var typed openreportsv1alpha1.ReportList
		if err := json.Unmarshal(data, &typed); err != nil {
			t.Fatalf("round %d: encoding/json refuses the page: %v", round, err)
		}
		type report struct {
			NS      string
			Results []leanResult
		}
		var want []report
		for _, r := range typed.Items {
			rep := report{NS: r.Namespace, Results: []leanResult{}}
			for _, x := range r.Results {
				rep.Results = append(rep.Results, leanOf(x))
			}
			want = append(want, rep)
		}
		for _, slow := range []bool{false, true} {
			var got []report
			var in = bytes.NewReader(data)
			s := newScanner(in, 0)
			if slow {
				s = newScanner(iotest.OneByteReader(in), 0)
			}
			next, err := newPageReader().page(s, 10, func(ns string, rs []leanResult) {
				got = append(got, report{NS: ns, Results: append([]leanResult{}, rs...)})
			})
			if err != nil || next != typed.Continue || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d (one byte a read: %v): %q, %v\n got %+v\nwant %+v\n%s", round, slow, next, err, got, want, data)
			}
		}
		for cut := 0; cut < len(data)-1; cut += 1 + rng.Intn(40) {
			if _, err := newPageReader().page(newScanner(bytes.NewReader(data[:cut]), 0), 10, func(string, []leanResult) {}); err == nil {
				t.Fatalf("round %d: a page cut at byte %d read: %s", round, cut, data[:cut])
			}
		}
	}
}

// A page that is not a page, or more than asked for, is an error.
func TestPageReaderRefuses(t *testing.T) {
	for _, page := range []string{``, `[]`, `{"items":[{"results":[{"source":1}]}]}`, `{"items":[{"results":[{"properties":{"owner":2}}]}]}`,
		`{"items":[{"results":[{"rule":"\x01"}]}]}`, `{"items":[{"results":[{"rule":"a\qb"}]}]}`, `{"items":[] "x":1}`, `{"items":[]}}`,
		`{"items":[{},{}]}`, `{"items":[tru]}`, `{"items":[{"a":01}]}`, `{"a":"b"}x`, `{"items":[{"a":` + strings.Repeat("[", maxDepth+2)} {
		if _, err := newPageReader().page(newScanner(strings.NewReader(page), 0), 1, func(string, []leanResult) {}); err == nil {
			t.Errorf("page %.80q read", page)
		}
	}
	big := `{"items":[{"metadata":{"namespace":"` + strings.Repeat("a", 200<<10) + `"}}]}`
	if _, err := newPageReader().page(newScanner(strings.NewReader(big), 100<<10), 1, func(string, []leanResult) {}); !errors.Is(err, ErrAnswerTooLarge) {
		t.Errorf("an answer over its bound: %v", err)
	}
}

// Grouped as they come (collector), a cluster's items make the groups
// GroupItems makes of them all: unknown looks of pods with a present one
// dropped, the others kept, with and without expectations.
func TestCollectorAsGroupItems(t *testing.T) {
	var items []Item
	for i := 0; i < 300; i++ {
		it := item(fmt.Sprintf("ns%d", i%3), "Deployment", fmt.Sprintf("w%d", i%7), fmt.Sprintf("p%d", i%40), []string{findings.ImpactLegacy, findings.ImpactXt, findings.ImpactNative, ""}[i%4], nil, "")
		it.PodUID = fmt.Sprintf("u%d", i%40)
		it.Impact = findings.Impact{Legacy: i % 2, Xt: i % 3, Native: i % 5}
		if i%11 == 0 {
			it.State, it.Error = findings.StateUnknown, "busy"
		}
		it.Examples = []findings.Example{{Impact: it.Worst, Rule: fmt.Sprintf("-A X -j R%d", i%5)}}
		items = append(items, it)
	}
	exps := []Expectation{{Namespace: "ns1", Reason: "known"}}
	for _, e := range [][]Expectation{nil, exps} {
		for _, ns := range []string{"", "ns2"} {
			c := newCollector(ns, e)
			for _, it := range items {
				c.add(it)
			}
			if got, want := c.groups(), GroupItems(InNamespace(items, ns), e); !reflect.DeepEqual(got, want) {
				t.Errorf("namespace %q, %d expectations: collector\n%+v\nGroupItems\n%+v", ns, len(e), got, want)
			}
		}
	}
}

// Made once for the pods of a workload (resultCache), an Item is the one
// valid(resultItem) makes for each pod, invalid values counted alike.
func TestResultCacheAsResultItem(t *testing.T) {
	var xs []leanResult
	for _, own := range []string{"", "/", "Deployment/web", "bad kind/web", "Deployment/Bad_Name", "Pod/web-1", "Pod/Web 1"} {
		for _, pod := range []string{"web-1", "Web 1", ""} {
			for _, doc := range []string{"", "https://istio.io/", "javascript:alert(1)"} {
				x := leanResult{Ours: true, Rule: findings.ImpactXt, HasPod: pod != "", Pod: leanSubject{Name: pod, UID: "u-" + pod}}
				x.Props = leanProps{Owner: own, Vendor: "istio,x", Doc: doc, Modules: "ip_tables,bad-name", Rules: "legacy=-1 xt=2", PodUID: "p-uid",
					Examples: [openreports.MaxExamples]string{"[ip nat, bogus] -A X", strings.Repeat("r", 600)}, HasExample: [openreports.MaxExamples]bool{true, true}}
				xs = append(xs, x)
				x.Pod.UID = ""
				xs = append(xs, x)
			}
		}
	}
	cache := &resultCache{}
	for round := 0; round < 2; round++ {
		for i := range xs {
			var want, got Skipped
			wit, wok := resultItem("shop", &xs[i], &want)
			if wok {
				wit = valid(wit, &want)
			}
			git, gok := cache.item("shop", &xs[i], &got)
			if gok != wok || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(git, wit) {
				t.Fatalf("result %+v:\ncached %v %+v %+v\n  made %v %+v %+v", xs[i], gok, got, git, wok, want, wit)
			}
		}
	}
}

// BenchmarkReadPages reads a page of 50 Reports of 100 results like the
// forwarder's (tests/bench BenchmarkReports' report part) and groups
// them: the part of report's CPU that is its own, without the API
// server, TLS and gunzip.
func BenchmarkReadPages(b *testing.B) {
	x := openreportsv1alpha1.ReportResult{Source: openreports.Source, Policy: openreports.Policy, Rule: findings.ImpactLegacy, Result: "fail",
		Severity: "high", Scored: true, Description: strings.Repeat("Breaks on RHEL 10: legacy x_tables rules. ", 24),
		Properties: map[string]string{openreports.PropOwner: "Deployment/big", openreports.PropNodes: "node-0", openreports.PropRules: "legacy=1 xt=5 native=10 total=16",
			openreports.PropVendor: "istio", openreports.PropHint: strings.Repeat("Istio 1.27+: nativeNftables. ", 8), openreports.PropDoc: "https://istio.io/latest/news/",
			openreports.PropExample + "1": "[ip filter, legacy] -A OUTPUT -d 169.254.169.254 -p tcp --dport 80 -j DROP",
			openreports.PropExample + "2": "[ip nat, xt] -A ISTIO_OUTPUT ! -d 127.0.0.1 -o lo -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT",
			openreports.PropExample + "3": "[ip nat, native] -A PREROUTING -p tcp -j ISTIO_INBOUND", openreports.PropLastSeen: "2026-11-27T16:41:46Z",
			openreports.PropFirstSeen: "2026-11-27T16:41:46Z", openreports.PropMixedBackends: "true", openreports.PropModules: "ip_tables,iptable_filter,nft_compat,xt_REDIRECT,xt_owner",
			openreports.PropFingerprint: "f820431f1b190b29e386e1d54fed224e", openreports.PropContainer: "app"}}
	var list openreportsv1alpha1.ReportList
	for r := 0; r < reportsPage; r++ {
		rep := openreportsv1alpha1.Report{}
		rep.Namespace, rep.Name = "bench-0", fmt.Sprintf("iptables-deployment-big%d-node-0", r)
		for k := 0; k < openreports.MaxResults; k++ {
			y := x
			y.Properties = map[string]string{}
			for key, v := range x.Properties {
				y.Properties[key] = v
			}
			pod, uid := fmt.Sprintf("big%d-7c9f8-p%03d", r, k), fmt.Sprintf("00000000-0000-0000-%04d-%012d", k, r)
			y.Subjects = []corev1.ObjectReference{{APIVersion: "v1", Kind: "Pod", Namespace: "bench-0", Name: pod, UID: types.UID(uid)}}
			y.Properties[openreports.PropOwner], y.Properties[openreports.PropPodUID], y.Properties[openreports.PropPods] = fmt.Sprintf("Deployment/big%d", r), uid, pod
			rep.Results = append(rep.Results, y)
		}
		list.Items = append(list.Items, rep)
	}
	data, err := json.Marshal(list)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var sk Skipped
		p, cache, c := newPageReader(), &resultCache{}, newCollector("", nil)
		if _, err := p.page(newScanner(bytes.NewReader(data), 0), reportsPage, func(ns string, rs []leanResult) {
			for i := range rs {
				if it, ok := cache.item(ns, &rs[i], &sk); ok {
					c.add(it)
				}
			}
		}); err != nil {
			b.Fatal(err)
		}
		if gs := c.groups(); len(gs) != reportsPage {
			b.Fatalf("%d groups", len(gs))
		}
	}
}

// A name plainSubdomain passes is one IsDNS1123Subdomain passes.
func TestPlainSubdomain(t *testing.T) {
	alphabet := []byte("ab0-.A_")
	rng := rand.New(rand.NewSource(1))
	names := []string{"web-1", "a.b", "a--b", "big0-7c9f8-p000", strings.Repeat("a", 253), strings.Repeat("a", 254)}
	for i := 0; i < 200000; i++ {
		b := make([]byte, 1+rng.Intn(8))
		for j := range b {
			b[j] = alphabet[rng.Intn(len(alphabet))]
		}
		names = append(names, string(b))
	}
	for _, n := range names {
		if plainSubdomain(n) && len(validation.IsDNS1123Subdomain(n)) > 0 {
			t.Fatalf("%q passes plainSubdomain, not IsDNS1123Subdomain", n)
		}
	}
	if !plainSubdomain("big0-7c9f8-p000") || !plainSubdomain("a.b-c.d") {
		t.Error("a plain name is not plain")
	}
}

// chunks reads at most n bytes a call.
type chunks struct {
	r io.Reader
	n int
}

func (c chunks) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// TestStringBackslashRuns: runs of backslashes before quotes, split across
// reads anywhere (a run's count is carried from one read to the next),
// end a string exactly where encoding/json ends it.
func TestStringBackslashRuns(t *testing.T) {
	var cases []string
	for _, k := range []int{0, 1, 2, 3, 4, 7, 8, 70000, 70001} {
		for _, tail := range []string{`"`, `x"`, `\\"`} {
			// A value of k backslashes, an escaped quote if k is odd (so
			// the JSON stays valid), then the tail.
			v := strings.Repeat(`\\`, k/2)
			if k%2 == 1 {
				v += `\"`
			}
			cases = append(cases, `"a`+v+tail[:len(tail)-1]+`"`)
		}
	}
	for _, js := range cases {
		var want string
		if err := json.Unmarshal([]byte(js), &want); err != nil {
			t.Fatalf("case %.40q: %v", js, err)
		}
		for _, n := range []int{1, 2, 3, 5, 64 << 10, 1 << 20} {
			s := newScanner(chunks{strings.NewReader(js + `,`), n}, 0)
			if s.peek() != '"' {
				t.Fatalf("case %.40q: no quote first", js)
			}
			got, err := s.stringValue()
			if err != nil || string(got) != want {
				t.Fatalf("case %.40q, %d bytes a read: %.40q, %v; want %.40q", js, n, got, err, want)
			}
			if err := s.expect(','); err != nil {
				t.Fatalf("case %.40q, %d bytes a read: not at the comma after the string: %v", js, n, err)
			}
		}
	}
}
