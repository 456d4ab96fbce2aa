package nstest

import _ "embed"

// IstioNAT is the shape of what istio-init writes (trimmed), for
// iptables-nft-restore: 4 user chains jumped to from PREROUTING and OUTPUT,
// REDIRECTs to the sidecar, owner matches (xt compat in nftables); 6 chains
// and 15 rules in nftables. tests/demo.sh reads the same file.
//
//go:embed testdata/istio-nat.rules
var IstioNAT string
