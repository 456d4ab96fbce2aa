package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// MaxAnswer bounds the bytes of one answer of the API server. client-go
// holds a whole answer and then its decoded objects, several times its
// size: one list answer of 330 MB from a hostile server took 1.74 GB. Our
// largest pages are far smaller: 50 Reports of at most 100 results of a
// few KiB each (reportsPage) are some 30 MiB, 500 Events a few MiB.
const MaxAnswer = 64 << 20

// ErrAnswerTooLarge is an answer over MaxAnswer, refused whole.
var ErrAnswerTooLarge = fmt.Errorf("answer over %d MiB: refused (no page of ours is that large: a broken or hostile API server?)", MaxAnswer>>20)

// capAnswers refuses, in the transport, an answer over max bytes: a
// declared length at once, any other once max+1 bytes are read. It reads
// the answer before client-go does, so that a refused one reaches it as a
// request error, not as a body cut short (which it logs as unexpected).
func capAnswers(rt http.RoundTripper, max int64) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.Body == nil {
			return resp, err
		}
		if resp.ContentLength > max {
			resp.Body.Close()
			return nil, ErrAnswerTooLarge
		}
		if req.Context().Value(streamedKey{}) != nil {
			// Its reader counts the bytes itself (scanner): holding a
			// page of 15 MB whole was the most of the report's memory.
			return resp, nil
		}
		defer resp.Body.Close()
		h, err := readAtMost(resp.Body, max)
		if err != nil {
			return nil, err
		}
		resp.Body = h
		return resp, nil
	})
}

// Chunks of an answer read: small answers (a pod, discovery) take little,
// large ones are never copied to grow.
const (
	firstChunk = 32 << 10
	lastChunk  = 1 << 20
)

// readAtMost reads r to its end, ErrAnswerTooLarge past max bytes.
func readAtMost(r io.Reader, max int64) (*heldBody, error) {
	var (
		h     heldBody
		total int64
	)
	for size := firstChunk; ; size = min(2*size, lastChunk) {
		chunk := make([]byte, size)
		n, err := io.ReadFull(r, chunk)
		if total += int64(n); total > max {
			return nil, ErrAnswerTooLarge
		}
		if n > 0 {
			h.chunks = append(h.chunks, chunk[:n])
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &h, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// heldBody is an answer read in full; it lets go of each chunk once read,
// so the bytes are not kept while client-go decodes its own copy.
type heldBody struct{ chunks [][]byte }

func (h *heldBody) Read(p []byte) (int, error) {
	for len(h.chunks) > 0 && len(h.chunks[0]) == 0 {
		h.chunks[0], h.chunks = nil, h.chunks[1:]
	}
	if len(h.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, h.chunks[0])
	h.chunks[0] = h.chunks[0][n:]
	return n, nil
}

func (h *heldBody) Close() error {
	h.chunks = nil
	return nil
}

// streamedKey marks the context of a request whose answer is read as it
// streams in by a reader that stops at MaxAnswer itself.
type streamedKey struct{}

// streamed marks ctx's requests as streamed (streamedKey).
func streamed(ctx context.Context) context.Context {
	return context.WithValue(ctx, streamedKey{}, true)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// checkPage refuses a list page with more items than the limit asked for:
// the server is not paging as asked, and the next page could be as large.
func checkPage(what string, items int, limit int64) error {
	if int64(items) > limit {
		return fmt.Errorf("list %s: the API server answered %d items to a page of %d: refused (a broken or hostile API server?)", what, items, limit)
	}
	return nil
}
