package render

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"hash/fnv"

	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
)

// MaxField caps any single attacker-controlled string in the output (a
// comment can be 256 bytes, a chain name far less; a hostile kernel object
// could claim more).
const MaxField = 256

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// maxHex bytes of an opaque blob are shown; longer blobs are cut and carry
// their length and an FNV-1a hash so different blobs stay different.
const maxHex = 64

// blob renders bytes for an opaque token: "[hex]" or "[hex...+N#hash]".
func blob(data []byte) string {
	if len(data) <= maxHex {
		return "[" + hex.EncodeToString(data) + "]"
	}
	h := fnv.New32a()
	h.Write(data)
	return fmt.Sprintf("[%s...+%d#%08x]", hex.EncodeToString(data[:maxHex]), len(data)-maxHex, h.Sum32())
}

// opaque is the token for anything not decoded: "-m unknown:KIND/NAME[hex]".
func opaque(kind, name string, data []byte) string {
	flag := "-m"
	if kind == "target" {
		flag = "-j"
	}
	return flag + " unknown:" + kind + "/" + safetext.Name(name, 64) + blob(data)
}
