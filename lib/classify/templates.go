package classify

import "github.com/iptables-alerter/iptables-alerter/lib/inspect"

// Netfilter hook numbers: NF_INET_* (also used by the bridge family) and
// NF_ARP_*.
const (
	preRouting  = 0
	localIn     = 1
	forward     = 2
	localOut    = 3
	postRouting = 4
	arpIn       = 0
	arpOut      = 1
)

type baseChain struct {
	hook     uint32
	typ      string
	priority int32
}

type tableKey struct {
	fam  inspect.Family
	name string
}

// The base chains of the iptables-nft and ip6tables-nft tables: one set for
// both families.
var (
	inetFilter = map[string]baseChain{
		"INPUT":   {localIn, "filter", 0},
		"FORWARD": {forward, "filter", 0},
		"OUTPUT":  {localOut, "filter", 0},
	}
	inetNAT = map[string]baseChain{
		"PREROUTING":  {preRouting, "nat", -100},
		"INPUT":       {localIn, "nat", 100},
		"OUTPUT":      {localOut, "nat", -100},
		"POSTROUTING": {postRouting, "nat", 100},
	}
	inetMangle = map[string]baseChain{
		"PREROUTING":  {preRouting, "filter", -150},
		"INPUT":       {localIn, "filter", -150},
		"FORWARD":     {forward, "filter", -150},
		"OUTPUT":      {localOut, "route", -150},
		"POSTROUTING": {postRouting, "filter", -150},
	}
	inetRaw = map[string]baseChain{
		"PREROUTING": {preRouting, "filter", -300},
		"OUTPUT":     {localOut, "filter", -300},
	}
	inetSecurity = map[string]baseChain{
		"INPUT":   {localIn, "filter", 150},
		"FORWARD": {forward, "filter", 150},
		"OUTPUT":  {localOut, "filter", 150},
	}
)

// templates holds the base chains iptables-nft, ip6tables-nft, ebtables-nft
// and arptables-nft create (iptables 1.8.9, nft-shared tables), by table and
// chain name. The clients create each base chain lazily, on first use, so a
// shaped table may hold any subset of them.
var templates = map[tableKey]map[string]baseChain{
	{inspect.IP, "filter"}:   inetFilter,
	{inspect.IP, "nat"}:      inetNAT,
	{inspect.IP, "mangle"}:   inetMangle,
	{inspect.IP, "raw"}:      inetRaw,
	{inspect.IP, "security"}: inetSecurity,

	{inspect.IP6, "filter"}:   inetFilter,
	{inspect.IP6, "nat"}:      inetNAT,
	{inspect.IP6, "mangle"}:   inetMangle,
	{inspect.IP6, "raw"}:      inetRaw,
	{inspect.IP6, "security"}: inetSecurity,

	{inspect.ARP, "filter"}: {
		"INPUT":  {arpIn, "filter", 0},
		"OUTPUT": {arpOut, "filter", 0},
	},
	{inspect.Bridge, "filter"}: {
		"INPUT":   {localIn, "filter", -200},
		"FORWARD": {forward, "filter", -200},
		"OUTPUT":  {localOut, "filter", -200},
	},
	{inspect.Bridge, "nat"}: {
		"PREROUTING":  {preRouting, "filter", -300},
		"OUTPUT":      {localOut, "filter", 100},
		"POSTROUTING": {postRouting, "filter", 300},
	},
}

// IPTablesTable reports whether an iptables client makes a table of this
// family and name; inspect reads these first (inspect.Options.First).
func IPTablesTable(fam inspect.Family, table string) bool {
	_, ok := templates[tableKey{fam, table}]
	return ok
}

// Candidate tells inspect which rules may count as usage and so are worth
// keeping in detail: those in a table an iptables client could have made,
// and any rule holding an xt expression.
func Candidate(fam inspect.Family, table string, xt bool) bool {
	return xt || IPTablesTable(fam, table)
}
