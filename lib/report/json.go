package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
)

// writeJSON writes r as one indented JSON document: every group, with
// empty lists as [] rather than null.
func writeJSON(w io.Writer, r Report) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if r.Groups == nil {
		r.Groups = []Group{}
	}
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	// The same values, readable on a terminal without a bidi or C1
	// control taking effect.
	_, err := w.Write(safetext.JSON(b.Bytes()))
	return err
}
