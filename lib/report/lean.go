package report

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

// leanResult is what report reads of a Report's result (resultItem):
// whether its source is ours, its rule, whether its result is "error",
// its first Pod subject and the properties resultItem reads, each "" when
// missing, as a map lookup would give them.
type leanResult struct {
	Ours    bool
	Rule    string
	Errored bool
	Pod     leanSubject
	HasPod  bool
	// Node is the first Node subject: a node's result, read only from a
	// ClusterReport (a namespaced Report's is anyone's in the namespace).
	Node    leanSubject
	HasNode bool
	Props   leanProps
}

type leanSubject struct{ Name, UID string }

// leanProps are the properties resultItem reads; Seen is lastSeen read
// as openreports.Seen reads it.
type leanProps struct {
	Cut, Nodes, Truncated, Mixed, Modules, PodUID, Owner, Error, Rules, Writer, Command, Vendor, Hint, Doc string
	Seen                                                                                                   time.Time
	Examples                                                                                               [openreports.MaxExamples]string
	HasExample                                                                                             [openreports.MaxExamples]bool
}

// pageReader decodes list pages of Reports (listReports) into leanResults
// with a scanner: a value the report does not read is stepped over, never
// made into a Go value, and the strings the results of one workload repeat
// (namespace, owner, node, rules, vendor, hint, examples...) are made once
// and shared (intern). Decoding into structs with encoding/json, as before,
// took 7.55 s of CPU and 324 MB over 100,000 results (docs/performance.md).
type pageReader struct {
	strs map[string]string
	// last holds the properties last read: the results of a Report are
	// one workload's, mostly alike, and comparing is cheaper than hashing.
	last leanProps
	// seen caches the last lastSeen read: a Report's results are mostly
	// written at once.
	seenRaw []byte
	seen    time.Time
	results []leanResult
}

// maxInterned bounds the strings shared: past it, each is its own copy
// (a hostile Report's unique values would otherwise be kept for nothing).
const maxInterned = 1 << 16

func newPageReader() *pageReader { return &pageReader{strs: map[string]string{}} }

// intern gives b as a string, one copy for equal values.
func (p *pageReader) intern(b []byte) string {
	if s, ok := p.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.strs) < maxInterned {
		p.strs[s] = s
	}
	return s
}

// listReports asks for one page of Reports in namespace (all when empty)
// and hands each Report's namespace and results to each as the body
// streams in; next is the page's continue token. An API error keeps its
// status (apierrors.IsNotFound, IsForbidden). More items than opts.Limit
// are refused (checkPage), the body past MaxAnswer too, so a page costs at
// most one Report's results beyond the scanner's buffer.
func (p *pageReader) listReports(ctx context.Context, rc versioned.Interface, resource, namespace string, opts metav1.ListOptions, each func(namespace string, results []leanResult)) (next string, err error) {
	body, err := rc.OpenreportsV1alpha1().RESTClient().Get().Namespace(namespace).Resource(resource).
		VersionedParams(&opts, scheme.ParameterCodec).Stream(streamed(ctx))
	if err != nil {
		return "", err
	}
	defer body.Close()
	next, err = p.page(newScanner(body, MaxAnswer), opts.Limit, each)
	if err != nil {
		return "", fmt.Errorf("read page: %w", err)
	}
	return next, nil
}

// page reads a list page: its items and its continue token.
func (p *pageReader) page(s *scanner, limit int64, each func(string, []leanResult)) (next string, err error) {
	if err := s.expect('{'); err != nil {
		return "", err
	}
	n := 0
	err = s.members(func(key []byte) error {
		switch string(key) {
		case "items":
			ok, err := s.open('[')
			if err != nil {
				return err
			}
			for first := true; ok; {
				more, err := s.next(']', &first)
				if err != nil {
					return err
				}
				if !more {
					break
				}
				n++
				if err := checkPage("reports", n, limit); err != nil {
					return err
				}
				ns, err := p.report(s)
				if err != nil {
					return fmt.Errorf("report %d: %w", n, err)
				}
				each(ns, p.results)
			}
		case "metadata":
			var err error
			if next, err = p.continueToken(s); err != nil {
				return fmt.Errorf("metadata: %w", err)
			}
		default:
			if err := s.skip(0); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return next, s.end()
}

// continueToken reads a list's metadata for its continue token.
func (p *pageReader) continueToken(s *scanner) (string, error) {
	next := ""
	err := s.object(func(key []byte) error {
		if string(key) != "continue" {
			return s.skip(1)
		}
		v, err := s.strOrNull()
		next = string(v)
		return err
	})
	return next, err
}

// report reads one Report into p.results, giving its namespace.
func (p *pageReader) report(s *scanner) (string, error) {
	ns := ""
	p.results = p.results[:0]
	err := s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "metadata":
			ns, err = p.namespace(s, ns)
		case "results":
			p.results = p.results[:0]
			var ok bool
			ok, err = s.open('[')
			for first := true; ok && err == nil; {
				if ok, err = s.next(']', &first); !ok || err != nil {
					break
				}
				p.results = append(p.results, leanResult{})
				err = p.result(s, &p.results[len(p.results)-1])
			}
		default:
			err = s.skip(1)
		}
		return err
	})
	return ns, err
}

// namespace reads a Report's metadata for its namespace (ns if none).
func (p *pageReader) namespace(s *scanner, ns string) (string, error) {
	err := s.object(func(key []byte) error {
		if string(key) != "namespace" {
			return s.skip(2)
		}
		v, err := s.strOrNull()
		if err == nil {
			ns = p.intern(v)
		}
		return err
	})
	return ns, err
}

// result reads one result into x.
func (p *pageReader) result(s *scanner, x *leanResult) error {
	return s.object(func(key []byte) error {
		var v []byte
		var err error
		switch string(key) {
		case "source":
			v, err = s.strOrNull()
			x.Ours = string(v) == openreports.Source
		case "rule":
			v, err = s.strOrNull()
			x.Rule = p.intern(v)
		case "result":
			v, err = s.strOrNull()
			x.Errored = string(v) == "error"
		case "resources":
			x.Pod, x.HasPod, x.Node, x.HasNode = leanSubject{}, false, leanSubject{}, false
			err = p.subjects(s, x)
		case "properties":
			err = p.props(s, &x.Props)
		default:
			err = s.skip(3)
		}
		return err
	})
}

// subjects reads a result's resources for its first Pod and first Node.
func (p *pageReader) subjects(s *scanner, x *leanResult) error {
	ok, err := s.open('[')
	for first := true; ok && err == nil; {
		if ok, err = s.next(']', &first); !ok || err != nil {
			break
		}
		var apiVersion, kind, name, uid string
		err = s.object(func(key []byte) error {
			var v []byte
			var err error
			switch string(key) {
			case "apiVersion":
				v, err = s.strOrNull()
				apiVersion = p.intern(v)
			case "kind":
				v, err = s.strOrNull()
				kind = p.intern(v)
			case "name":
				v, err = s.strOrNull()
				name = string(v)
			case "uid":
				v, err = s.strOrNull()
				uid = string(v)
			default:
				err = s.skip(5)
			}
			return err
		})
		switch {
		case err != nil:
		case !x.HasPod && openreports.IsPod(apiVersion, kind):
			x.Pod, x.HasPod = leanSubject{Name: name, UID: uid}, true
		case !x.HasNode && kind == "Node" && (apiVersion == "" || apiVersion == "v1"):
			x.Node, x.HasNode = leanSubject{Name: name}, true
		}
	}
	return err
}

// props reads a result's properties: those resultItem reads, the others
// stepped over. A null clears them, as it makes the map nil; a second
// properties object adds to the first, as it adds to the map.
func (p *pageReader) props(s *scanner, lp *leanProps) error {
	ok, err := s.open('{')
	if err != nil {
		return err
	}
	if !ok {
		*lp = leanProps{}
		return nil
	}
	return s.members(func(key []byte) error {
		var v []byte
		var err error
		switch string(key) {
		case openreports.PropPodUID:
			// One a pod: not shared.
			if v, err = s.strOrNull(); err == nil {
				lp.PodUID = string(v)
			}
			return err
		case openreports.PropLastSeen:
			if v, err = s.strOrNull(); err == nil {
				lp.Seen = p.seenAt(v)
			}
			return err
		}
		dst := propField(lp, key)
		if dst == nil {
			// Not read, but it must be a string as the map's values are
			// (its escapes are not checked, as no value stepped over is).
			if s.peek() == '"' {
				return s.skip(4)
			}
			_, err = s.strOrNull()
			return err
		}
		if i := exampleIndex(key); i >= 0 {
			lp.HasExample[i] = true
		}
		last := propField(&p.last, key)
		if v, err = s.strOrNull(); err == nil {
			if *last != string(v) {
				*last = p.intern(v)
			}
			*dst = *last
		}
		return err
	})
}

// propField is the field of lp that holds the property key, nil for one
// not read.
func propField(lp *leanProps, key []byte) *string {
	switch string(key) {
	case "cut":
		return &lp.Cut
	case openreports.PropNodes:
		return &lp.Nodes
	case openreports.PropTruncated:
		return &lp.Truncated
	case openreports.PropMixedBackends:
		return &lp.Mixed
	case openreports.PropModules:
		return &lp.Modules
	case openreports.PropOwner:
		return &lp.Owner
	case openreports.PropError:
		return &lp.Error
	case openreports.PropRules:
		return &lp.Rules
	case openreports.PropWriter:
		return &lp.Writer
	case openreports.PropCommand:
		return &lp.Command
	case openreports.PropVendor:
		return &lp.Vendor
	case openreports.PropHint:
		return &lp.Hint
	case openreports.PropDoc:
		return &lp.Doc
	}
	if i := exampleIndex(key); i >= 0 {
		return &lp.Examples[i]
	}
	return nil
}

// exampleIndex is i-1 for the key example<i>, i up to MaxExamples; -1
// for any other key.
func exampleIndex(key []byte) int {
	rest, ok := bytes.CutPrefix(key, []byte(openreports.PropExample))
	if !ok || len(rest) == 0 || rest[0] == '0' || rest[0] == '+' || rest[0] == '-' {
		return -1
	}
	i, err := strconv.Atoi(string(rest))
	if err != nil || i < 1 || i > openreports.MaxExamples {
		return -1
	}
	return i - 1
}

// seenAt reads a lastSeen value as openreports.Seen does.
func (p *pageReader) seenAt(v []byte) time.Time {
	if !bytes.Equal(v, p.seenRaw) || p.seenRaw == nil {
		p.seenRaw = append(p.seenRaw[:0:0], v...)
		p.seen = openreports.SeenAt(string(v))
	}
	return p.seen
}
