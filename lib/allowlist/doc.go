// Package allowlist takes away the rules an admin (or the platform) declared
// harmless before a finding is made.
//
// It takes a classify.Usage and the canonical text of each kept rule and
// gives the Usage without the matched rules, with how many were taken and by
// which entries. It has no side effects beyond reading its file.
//
// Entries match on the rule's meaning (canonical text from package render),
// never on some iptables client's own output, which changes between versions.
// Regular expressions are RE2 (linear time on hostile text) and must match
// the whole rule text.
package allowlist
