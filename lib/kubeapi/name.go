package kubeapi

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// nameInfix separates the readable part of an object name from its hash, so
// `kubectl get events` shows which pod it is about.
const nameInfix = ".iptalert-"

// maxName is the limit of a DNS subdomain, which object names must be.
const maxName = 253

// ObjectName is a valid object name (a DNS subdomain) made from readable,
// cut and cleaned so `kubectl get` shows what it is about, and a hash of
// parts, so the same parts always give the same name: replaying the
// findings file cannot double an object. The parts are hashed with a
// separator that cannot occur in them, so ("ab","c") and ("a","bc") differ.
func ObjectName(readable string, parts ...string) string {
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
