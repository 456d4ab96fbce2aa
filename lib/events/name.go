package events

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// nameInfix separates the readable part of an Event name from its hash, so
// `kubectl get events` shows which pod it is about.
const nameInfix = ".iptalert-"

// maxName is the limit of a DNS subdomain, which Event names must be.
const maxName = 253

// PodEventName is the name of the Event for a record: the same finding in
// the same sandbox of the same pod always gets the same name, so replaying
// the findings file cannot double an Event. A state other than present is
// part of the name, so a usage Event is never answered AlreadyExists by
// the unknown one of the same fingerprint; a present one's name is what it
// was before states, so a replay after an upgrade doubles nothing.
func PodEventName(rec findings.Record) string {
	if st := rec.KnownState(); st != findings.StatePresent {
		return eventName(rec.Pod.Name, rec.Fingerprint, rec.SandboxID, rec.Pod.UID, string(st))
	}
	return eventName(rec.Pod.Name, rec.Fingerprint, rec.SandboxID, rec.Pod.UID)
}

// NodeEventName is the name of the node summary Event: one per node and
// usage fingerprint, however many pods show the same rules.
func NodeEventName(node, fingerprint string) string {
	return eventName(node, "node", node, fingerprint)
}

// eventName hashes the parts with a separator that cannot occur in them, so
// ("ab","c") and ("a","bc") differ.
func eventName(readable string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	suffix := nameInfix + hex.EncodeToString(h.Sum(nil))[:16]
	prefix := dnsLabelish(readable, maxName-len(suffix))
	if prefix == "" {
		prefix = "pod"
	}
	return prefix + suffix
}

// dnsLabelish keeps the characters a DNS subdomain allows, so a name taken
// from the record can never make the API reject the Event, and trims what
// may not end or start a label.
func dnsLabelish(s string, limit int) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	out := b.String()
	if len(out) > limit {
		out = out[:limit]
	}
	// A label must start and end alphanumeric; dots would leave empty labels.
	out = strings.Trim(out, "-.")
	for strings.Contains(out, "..") {
		out = strings.ReplaceAll(out, "..", ".")
	}
	out = strings.ReplaceAll(out, "-.", "-x.")
	out = strings.ReplaceAll(out, ".-", ".x-")
	if len(out) > limit {
		out = strings.Trim(out[:limit], "-.")
	}
	return out
}

// ObjectName is a valid object name made from readable (cut and cleaned)
// and a hash of parts, for other objects derived from findings (reports).
func ObjectName(readable string, parts ...string) string { return eventName(readable, parts...) }
