package main

import (
	"github.com/iptables-alerter/iptables-alerter/internal/child"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/ipset"
)

// probes is the table of child probes main gives child.Main: every probe a
// command of either build may start. A probe left out would make its Start
// fail (child.ErrUnlisted); probes_test.go fails first, since it finds every
// probe the module's code declares.
var probes = []*child.Probe{inspect.LegacyProbe, ipset.Probe}
