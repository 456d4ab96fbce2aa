package report

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/openreports/reports-api/pkg/client/clientset/versioned"
	"github.com/openreports/reports-api/pkg/client/clientset/versioned/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/iptables-alerter/iptables-alerter/lib/openreports"
)

// leanReport is what report reads of a Report: the namespace and the
// results' fields resultItem reads. Decoding into it, one Report of a
// list page at a time as the body streams in, rather than a page of typed
// Reports (every field, the whole body held, then the objects), took
// report over 100,000 results from 6.4-11.7 s and 204-278 MB to the
// figures of docs/performance.md.
type leanReport struct {
	Metadata struct {
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Results []leanResult `json:"results"`
}

// leanResult is a Report result as resultItem reads it.
type leanResult struct {
	Source     string            `json:"source"`
	Rule       string            `json:"rule"`
	Result     string            `json:"result"`
	Subjects   []leanSubject     `json:"resources"`
	Properties map[string]string `json:"properties"`
}

type leanSubject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

// listReports asks for one page of Reports in namespace (all when empty)
// and hands each to each as it is decoded from the streamed body; next
// is the page's continue token. An API error keeps its status
// (apierrors.IsNotFound, IsForbidden). More items than opts.Limit are
// refused (checkPage), so a page costs at most that many Reports (the API
// server's request size bounds one) beyond the Items.
func listReports(ctx context.Context, rc versioned.Interface, namespace string, opts metav1.ListOptions, each func(*leanReport)) (next string, err error) {
	body, err := rc.OpenreportsV1alpha1().RESTClient().Get().Namespace(namespace).Resource("reports").
		VersionedParams(&opts, scheme.ParameterCodec).Stream(ctx)
	if err != nil {
		return "", err
	}
	defer body.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(body, 64<<10))
	if err := delim(dec, json.Delim('{')); err != nil {
		return "", err
	}
	n := 0
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("read page: %w", err)
		}
		switch key {
		case "items":
			if err := delim(dec, json.Delim('[')); err != nil {
				return "", err
			}
			for dec.More() {
				n++
				if err := checkPage("reports", n, opts.Limit); err != nil {
					return "", err
				}
				var r leanReport
				if err := dec.Decode(&r); err != nil {
					return "", fmt.Errorf("read page: report %d: %w", n, err)
				}
				each(&r)
			}
			if err := delim(dec, json.Delim(']')); err != nil {
				return "", err
			}
		case "metadata":
			var m struct {
				Continue string `json:"continue"`
			}
			if err := dec.Decode(&m); err != nil {
				return "", fmt.Errorf("read page: metadata: %w", err)
			}
			next = m.Continue
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", fmt.Errorf("read page: %v: %w", key, err)
			}
		}
	}
	if err := delim(dec, json.Delim('}')); err != nil {
		return "", err
	}
	return next, nil
}

// delim reads the next token, which must be want.
func delim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("read page: cut short before %q", want)
	}
	if err != nil {
		return fmt.Errorf("read page: %w", err)
	}
	if tok != want {
		return fmt.Errorf("read page: %v where %q was due", tok, want)
	}
	return nil
}

// podSubject is the result's Pod, whatever comes first (results written
// since the workload is listed first name it second).
func (x leanResult) podSubject() (leanSubject, bool) {
	for _, s := range x.Subjects {
		if openreports.IsPod(s.APIVersion, s.Kind) {
			return s, true
		}
	}
	return leanSubject{}, false
}
