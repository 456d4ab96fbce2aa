package findings

import (
	"encoding/json"
	"fmt"
)

// Parse decodes one line of the findings file. It rejects other schemas and
// records without the ids consumers key on, so a malformed line is one error
// the consumer can count and skip. A line without a state (written before
// the field existed) or with a state this reader does not know gets
// KnownState's, so consumers can switch on State alone; likewise Subject
// (KnownSubject).
func Parse(line []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return Record{}, fmt.Errorf("decode finding: %w", err)
	}
	if r.Schema != Schema {
		return Record{}, fmt.Errorf("decode finding: schema %q, want %q", r.Schema, Schema)
	}
	if r.Fingerprint == "" {
		return Record{}, fmt.Errorf("decode finding: no fingerprint")
	}
	r.State = r.KnownState()
	if len(r.Legacy.Examples) > 0 {
		// Worst first, as Encode was given them (see Legacy.Examples).
		r.Examples = append(r.Legacy.Examples, r.Examples...)
	}
	r.Legacy.Examples = nil
	// Older readers ignore the field: a node's record reads to them as a
	// pod's with no name, never as another pod's.
	r.Subject = r.KnownSubject()
	return r, nil
}
