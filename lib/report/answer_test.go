package report

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// An answer up to the bound reaches the reader whole, byte for byte; one
// past it is refused, whether it declares its length or not.
func TestCapAnswers(t *testing.T) {
	const max = 3*lastChunk + 12345
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("declared") == "1" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.Write(pattern(n))
	}))
	defer srv.Close()
	client := &http.Client{Transport: capAnswers(http.DefaultTransport, max)}
	for _, c := range []struct {
		n        int
		declared string
		refused  bool
	}{
		{0, "1", false}, {1, "0", false}, {firstChunk, "0", false}, {max, "0", false}, {max, "1", false},
		{max + 1, "0", true}, {max + 1, "1", true}, {10 * max, "0", true},
	} {
		resp, err := client.Get(srv.URL + "/?n=" + strconv.Itoa(c.n) + "&declared=" + c.declared)
		if c.refused {
			if !errors.Is(err, ErrAnswerTooLarge) {
				t.Errorf("%d bytes (declared %s): %v, want refused", c.n, c.declared, err)
			}
			if err == nil {
				resp.Body.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("%d bytes (declared %s): %v", c.n, c.declared, err)
			continue
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(got, pattern(c.n)) {
			t.Errorf("%d bytes (declared %s): read %d bytes, %v", c.n, c.declared, len(got), err)
		}
	}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

func TestCheckPage(t *testing.T) {
	if err := checkPage("events", 500, 500); err != nil {
		t.Error(err)
	}
	if err := checkPage("events", 501, 500); err == nil {
		t.Error("a page of 501 items to a limit of 500 was taken")
	}
}
