// Package wording puts a finding in words for people: the Event note
// (Note, UnknownNote), one example rule (ExampleLine) and the process
// that wrote the rules (WriterLine). The consumers that show a finding
// (lib/events, lib/openreports, lib/report) all say it with these, so an
// Event, a Report and a report read alike.
//
// Invariants: every text is valid UTF-8 and holds no control or bidi
// characters from the record (they are escaped, internal/safetext); a
// note never exceeds NoteLimit bytes, a writer line MaxWriterLine; an
// example rule is shown whole or not at all.
package wording
