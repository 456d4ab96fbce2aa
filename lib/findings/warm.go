package findings

import (
	"encoding/json"
	"time"
)

// Warm does the one-time work of a process's first record ahead of it:
// encoding/json builds its encoders for a type at its first use (for a
// Record and the memory's entry, 0.4 to 1.2 ms here, where the next
// encoding takes microseconds), and the time package reads the local
// zone the log line is stamped with at its first format. A one-shot look
// (the hook) calls it beside its dumps, on a core they leave idle
// (scan.Loaders.Warm), instead of paying it after them on the container's
// start path; without it the first record pays it, as before.
func Warm() {
	// Encoders are built for the types, so the empty values build all
	// of them, nested lists and pointers included.
	_, _ = json.Marshal(Record{})
	_, _ = json.Marshal(seenEntry{})
	_ = time.Now().Format(time.RFC3339)
}
