// Package hooksd holds the hooks.d JSON that make install, the image and
// the MachineConfig install, so that install-hook carries the same file in
// its binary and needs no copy of it on the node.
package hooksd

import _ "embed"

// JSON is iptables-alerter.json, naming the binary under /usr/local/bin/.
//
//go:embed iptables-alerter.json
var JSON []byte
