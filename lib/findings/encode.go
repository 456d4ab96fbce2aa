package findings

import (
	"encoding/json"
	"fmt"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
)

// MaxRecordBytes bounds one line of the file, newline included. Every
// string and list in a record may come from the pod (names, comments, rule
// text); without a bound one pod's findings could rotate everyone else's
// away.
const MaxRecordBytes = 4 << 10

// Per-field bounds, applied first; they cut nothing a kubelet or runtime
// writes (pod names are at most 253 bytes, ids 64).
const (
	maxField = 256
	maxRule  = 512
	maxList  = 32
	// lastField is what every string is cut to when dropping list entries
	// was not enough: even at six bytes per byte (JSON's \u00XX), the
	// fixed fields then fit MaxRecordBytes.
	lastField = 32
)

// Encode renders a record as one JSON line of at most MaxRecordBytes.
// encoding/json escapes control characters and replaces invalid UTF-8, so
// attacker-chosen strings can neither break the line nor forge another.
// Strings and lists over their bounds are cut; when the line is still too
// long, examples, then allowlist entries, then table names, then vendors are
// dropped from the end, and last every string is cut short; ListsCut is then
// set (the counts stay whole). ExamplesLeftOut is counted for the examples written. An empty or
// unknown State becomes KnownState's, a Subject KnownSubject's. A Worst or an
// example's Impact that is not one of ImpactLevels
// becomes "".
func Encode(rec Record) ([]byte, error) {
	rec.Schema = Schema
	rec.State = rec.KnownState()
	rec.Subject = rec.KnownSubject()
	if len(rec.Legacy.Examples) > 0 {
		// A record from Parse's caller that kept the line's split.
		rec.Examples = append(append([]Example(nil), rec.Legacy.Examples...), rec.Examples...)
	}
	if rec.Writer != nil {
		// A copy: cutting its strings must not change the caller's.
		w := *rec.Writer
		rec.Writer = &w
	}
	rec.Exec = rec.Exec.bound()
	for _, p := range rec.stringFields() {
		*p = safetext.Cut(*p, maxField)
	}
	// Ours, 32 hex digits; bounded in case a caller makes it otherwise.
	rec.Fingerprint = safetext.Cut(rec.Fingerprint, lastField*2)
	rec.Examples = append(make([]Example, 0, MaxExamples), rec.Examples[:min(len(rec.Examples), MaxExamples)]...)
	for i := range rec.Examples {
		ex := &rec.Examples[i]
		ex.Family, ex.Table, ex.Chain = safetext.Cut(ex.Family, maxField), safetext.Cut(ex.Table, maxField), safetext.Cut(ex.Chain, maxField)
		ex.Rule = safetext.Cut(ex.Rule, maxRule)
		if ImpactRank(ex.Impact) == len(ImpactLevels) {
			ex.Impact = ""
		}
	}
	if ImpactRank(rec.Worst) == len(ImpactLevels) {
		rec.Worst = ""
	}
	rec.Vendors = append(make([]Vendor, 0, MaxVendors), rec.Vendors[:min(len(rec.Vendors), MaxVendors)]...)
	for i := range rec.Vendors {
		v := &rec.Vendors[i]
		v.Name, v.Hint, v.Doc = safetext.Cut(v.Name, maxVendorName), safetext.Cut(v.Hint, maxHint), safetext.Cut(v.Doc, maxField)
	}
	rec.Modules = rec.Modules.bounded()
	rec.Nft.PerTable = append(make([]TableCount, 0, min(len(rec.Nft.PerTable), maxList)), rec.Nft.PerTable[:min(len(rec.Nft.PerTable), maxList)]...)
	for i := range rec.Nft.PerTable {
		t := &rec.Nft.PerTable[i]
		t.Table = safetext.Cut(t.Table, maxField)
	}
	lists := []*[]string{&rec.AllowlistEntries, &rec.Nft.Tables, &rec.Legacy.Tables}
	for _, p := range lists {
		// Lists are always present as arrays, never null.
		l := make([]string, 0, min(len(*p), maxList))
		for _, s := range (*p)[:min(len(*p), maxList)] {
			l = append(l, safetext.Cut(s, maxField))
		}
		*p = l
	}
	for {
		rec.ExamplesLeftOut = rec.LeftOut()
		b, err := json.Marshal(rec.onTheLine())
		if err != nil {
			return nil, fmt.Errorf("encode finding: %w", err)
		}
		if len(b)+1 <= MaxRecordBytes {
			return append(b, '\n'), nil
		}
		if !rec.shrink(lists) {
			return nil, fmt.Errorf("encode finding: %d bytes after cutting every field, bound %d", len(b)+1, MaxRecordBytes)
		}
		rec.ListsCut = true
	}
}

// onTheLine is the record as the line holds it: its legacy examples in
// Legacy.Examples, the others in Examples, both lists present.
func (r Record) onTheLine() Record {
	nft, legacy := make([]Example, 0, len(r.Examples)), make([]Example, 0, len(r.Examples))
	for _, ex := range r.Examples {
		if ex.Impact == ImpactLegacy {
			legacy = append(legacy, ex)
		} else {
			nft = append(nft, ex)
		}
	}
	r.Examples, r.Legacy.Examples = nft, legacy
	return r
}

// shrink takes one step towards a smaller line; false when nothing is left
// to take.
func (r *Record) shrink(lists []*[]string) bool {
	if n := len(r.Examples); n > 0 {
		r.Examples = r.Examples[:n-1]
		return true
	}
	if n := len(r.Nft.PerTable); n > 0 {
		r.Nft.PerTable = r.Nft.PerTable[:n-1]
		return true
	}
	if e := r.Exec; e != nil && len(e.Argv) > 1 {
		e.Argv, e.ArgvCut = e.Argv[:len(e.Argv)-1], true
		return true
	}
	for _, p := range lists {
		if n := len(*p); n > 0 {
			*p = (*p)[:n-1]
			return true
		}
	}
	if n := len(r.Vendors); n > 0 {
		r.Vendors = r.Vendors[:n-1]
		return true
	}
	cut := false
	for _, p := range r.stringFields() {
		if len(*p) > lastField {
			*p, cut = safetext.Cut(*p, lastField), true
		}
	}
	return cut
}

// stringFields are the record's free-form strings. The fingerprint is
// left out: a cut one would be another fingerprint.
func (r *Record) stringFields() []*string {
	f := []*string{&r.Node, &r.Source, &r.Stage, &r.ContainerID, &r.SandboxID,
		&r.Pod.Namespace, &r.Pod.Name, &r.Pod.UID, &r.Container, &r.Image, &r.Netns, &r.Error}
	if w := r.Writer; w != nil {
		f = append(f, &w.Comm, &w.ParentComm, &w.ContainerID, &w.Container,
			&w.Pod.Namespace, &w.Pod.Name, &w.Pod.UID, &w.Unit)
	}
	if e := r.Exec; e != nil {
		f = append(f, &e.Binary, &e.Tool, &e.Backend, &e.Operation, &e.Command, &e.Table, &e.Chain)
		for i := range e.Argv {
			f = append(f, &e.Argv[i])
		}
	}
	return f
}
