package scan

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"github.com/iptables-alerter/iptables-alerter/lib/allowlist"
	"github.com/iptables-alerter/iptables-alerter/lib/catalog"
	"github.com/iptables-alerter/iptables-alerter/lib/classify"
	"github.com/iptables-alerter/iptables-alerter/lib/inspect"
	"github.com/iptables-alerter/iptables-alerter/lib/ipset"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
	"github.com/iptables-alerter/iptables-alerter/lib/render"
)

// Result is one pass of the data flow over a netns: inspect, classify and,
// after Allow, the allowlist.
type Result struct {
	Usage   classify.Usage
	Allowed allowlist.Result
	// NetnsID identifies the namespace (device:inode) while it lives; it
	// stands in for the sandbox id when the runtime gives none.
	NetnsID string
	// Err is an inspection error; the usage is then a lower bound.
	Err error
	// AllowErr is the allowlist's load error; usage is then reported with
	// what could be loaded (the built-in entries).
	AllowErr error
	// Names are the ipset names the rules refer to by index; Text renders
	// with them.
	Names render.Names
	// Vendors is the vendor table Build matches the usage against; nil
	// names no vendor.
	Vendors *catalog.Table
	// VendorErr is the admin vendor file's load error; the built-in table
	// is used then.
	VendorErr error
	// State is the namespace's State as the look read it, known when
	// StateOK (inspect.Snapshot.State: a legacyInProcess look).
	State   inspect.State
	StateOK bool
	// Platform is the worst RHEL 10 level of the rules Loaders.Platform
	// took away ("" none): the node's platform (kube-proxy, the kubelet)
	// is no usage to alarm on, but what its rules need is the node's to
	// have on RHEL 10 (its readiness).
	Platform string
	// NftTook is how long the look's nftables read took
	// (inspect.Snapshot.NftTook).
	NftTook time.Duration
}

// Text renders a rule of the result, naming its ipsets.
func (r Result) Text(rule inspect.Rule) string { return r.Names.Text(rule) }

// LegacyText renders a legacy rule with the names read.
func (r Result) LegacyText(rule inspect.LegacyRule) string { return r.Names.LegacyText(rule) }

// Complete tells whether the inspection saw everything.
func (r Result) Complete() bool { return r.Err == nil && !r.Usage.Truncated }

// NftWhole tells whether the look's nftables read saw everything, its
// generation the same at its end as at its start (inspect.ErrIncomplete
// otherwise): where StateOK, its rules are those of State.Gen, and no
// later commit's. An incomplete result that does not say which part it
// missed read no part whole.
func (r Result) NftWhole() bool {
	return !r.Usage.NftPartial && (r.Complete() || r.Usage.LegacyPartial)
}

// LegacyWhole is NftWhole for the legacy x_tables read.
func (r Result) LegacyWhole() bool {
	return !r.Usage.LegacyPartial && (r.Complete() || r.Usage.NftPartial)
}

// Read opens path, inspects it and classifies what it holds. An error
// opening the namespace is returned (errors.Is netns.ErrNotExist when it is
// gone); errors after that are kept in the result with what was seen.
func Read(ctx context.Context, path string) (Result, error) {
	h, err := netns.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer h.Close()
	return ReadFrom(ctx, h, false), nil
}

// ReadFrom is Read on a namespace already open: the NRI agent opens it
// while the runtime waits (an open fd keeps the namespace alive after the
// runtime unmounts it) and reads it later. legacyInProcess is
// inspect.Options.LegacyInProcess: for long-running daemons only.
func ReadFrom(ctx context.Context, h *netns.Handle, legacyInProcess bool) Result {
	return readFrom(ctx, h, legacyInProcess, 0, nil)
}

// NodeDetail is the rule bound (Loaders.Detail) of a scan of the node's
// own namespace: the platform list matches rule text, so it must see every
// rule of kube-proxy's iptables mode (about 5 a Service; 32768 is 6,000
// Services). Its memory, up to about 32 MB, is spent only while such a
// namespace is read; the rules past it count as usage, never hidden.
const NodeDetail = 1 << 15

// readFrom is ReadFrom keeping up to detail rules (and detail KiB of their
// expressions) for the allowlist; 0 is inspect's default. firstListed is
// inspect.Options.FirstListed.
func readFrom(ctx context.Context, h *netns.Handle, legacyInProcess bool, detail int, firstListed func()) Result {
	var res Result
	if id, err := h.ID(); err == nil {
		res.NetnsID = id
	}
	snap, err := inspect.Inspect(ctx, h, inspect.Options{Detail: classify.Candidate, First: classify.IPTablesTable, Native: classify.Native, LegacyInProcess: legacyInProcess,
		// A one-shot look (the hook, the scan command) is waited on; a
		// daemon's scans fill its cores already.
		ReadAhead: !legacyInProcess,
		MaxDetail: detail, MaxDetailBytes: detail << 10, FirstListed: firstListed})
	res.Err = err
	res.State, res.StateOK, res.NftTook = snap.State, snap.StateOK, snap.NftTook
	res.Usage = classify.Classify(snap)
	// Only rules with -m set need a name, and asking costs a process.
	ids := render.SetIndexes(res.Usage.Rules)
	for _, id := range render.LegacySetIndexes(res.Usage.LegacyRules) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(time.Second)
		}
		// Without a name the rule still renders, with the set's index.
		res.Names.Sets, _ = ipset.Names(h, ids, deadline)
	}
	return res
}

// Loaders give the admin's tables Run applies.
type Loaders struct {
	Allow func() (*allowlist.List, error)
	// Platform, for the node's own namespace, is the built-in platform
	// list, applied with Allow's after it (Result.Platform).
	Platform *allowlist.List
	Vendors  func() (*catalog.Table, error)
	// Detail bounds the rules read in detail, which alone the allowlist
	// can match (0: inspect's default, 1024); NodeDetail for the node's.
	Detail int
	// Warm, if set, is work the record step will do anyway that an early
	// load (tables.early) does after the tables, beside the rest of the
	// look (findings.Warm, given by the hook and the scan command, where
	// it is wasted on text output but costs only the idle core); the look
	// never waits for it.
	Warm func()
}

// Run is Read followed by the allowlist of the pod's namespace, and the
// vendor table for Build.
func Run(ctx context.Context, path, namespace string, load Loaders) (Result, error) {
	h, err := netns.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer h.Close()
	return RunFrom(ctx, h, namespace, load, false), nil
}

// RunFrom is Run on a namespace already open, legacyInProcess as ReadFrom.
//
// The tables are loaded only when there is usage: most pods have none, and
// loading them (the admin's files read and parsed, the allowlist's
// expressions parsed) is work they need not pay. A one-shot
// look (not legacyInProcess: the hook, the scan command) on more than one
// processor starts loading them beside its dumps once it has listed an
// iptables client's table (tables.early).
func RunFrom(ctx context.Context, h *netns.Handle, namespace string, load Loaders, legacyInProcess bool) Result {
	t := &tables{load: load}
	var firstListed func()
	// With one processor the load would only take turns with the look.
	if !legacyInProcess && runtime.GOMAXPROCS(0) > 1 {
		firstListed = t.early
	}
	res := readFrom(ctx, h, legacyInProcess, load.Detail, firstListed)
	if res.Usage.Empty() {
		// An early load still under way ends on its own: nothing reads
		// what it sets.
		return res
	}
	t.wait()
	res.AllowErr = t.allowErr
	allow := t.allow
	if load.Platform != nil {
		// One list, so an emptied chain goes by any entry's declaration;
		// the admin's first, so a rule both match is named the admin's
		// (its level still counts: allowlist.Result.Worst).
		allow = allowlist.Join(allow, load.Platform)
	}
	res.Usage, res.Allowed = allow.Apply(res.Usage, namespace, res.Text)
	res.Platform = res.Allowed.Worst
	if load.Vendors != nil && !res.Usage.Empty() {
		if t.done == nil {
			t.vendors, t.vendorErr = load.Vendors()
		}
		res.Vendors, res.VendorErr = t.vendors, t.vendorErr
	}
	return res
}

// tables are the admin's tables a scan with usage applies, loaded after
// the look, or during it (early).
type tables struct {
	load Loaders
	// done is nil until early ran, then closed when its goroutine has set
	// the fields below, or panicked, or ended otherwise (a loader that
	// never returned leaves its loaded false).
	done         chan struct{}
	allowLoaded  bool
	vendorLoaded bool
	panicked     *LoaderPanic
	allow        *allowlist.List
	allowErr     error
	vendors      *catalog.Table
	vendorErr    error
}

// early loads both tables on a goroutine of their own while the look goes
// on: a 10,000-rule look's dumps hide all of it, a small one's end first
// and hide what they can (docs/performance.md, "The tables beside the
// dumps": 0.4 to 0.8 ms then, about 0.15 ms since the built-in vendor
// table is a Go literal and expressions compile at first use). The vendor
// table is loaded even if the allowlist will leave no usage.
func (t *tables) early() {
	if t.done != nil {
		return
	}
	t.done = make(chan struct{})
	go func() {
		t.tables()
		if t.load.Warm == nil {
			return
		}
		// Closing done readied the look's goroutine on this processor,
		// where it would wait behind Warm (a tenth of a millisecond
		// measured in the hook): it goes first, and Warm runs beside it
		// wherever a processor is free.
		runtime.Gosched()
		// After done is closed: the look goes on without it. What it
		// warms is only cached, so a panic here is dropped; the record
		// step doing the same work again raises it where it is logged.
		defer func() { _ = recover() }()
		t.load.Warm()
	}()
}

// tables loads both tables for early and closes done.
func (t *tables) tables() {
	defer close(t.done)
	// A panic off the caller's goroutine would end the process (for the
	// hook, kill the container); wait raises it where the loaders would
	// have run, with the stack of where it happened.
	defer func() {
		if r := recover(); r != nil {
			t.panicked = &LoaderPanic{Value: r, Stack: debug.Stack()}
		}
	}()
	t.allow, t.allowErr = t.load.Allow()
	t.allowLoaded = true
	if t.load.Vendors != nil {
		t.vendors, t.vendorErr = t.load.Vendors()
	}
	t.vendorLoaded = true
}

// errLoaderEnded is the tables' error when a loader ended its goroutine
// without returning or panicking (runtime.Goexit): nothing was loaded, and
// a scan must not apply an allowlist it does not have as if it had none.
var errLoaderEnded = errors.New("a table loader ended without returning")

// wait gives the allowlist: early's once it is done, else loaded now.
func (t *tables) wait() {
	if t.done == nil {
		t.allow, t.allowErr = t.load.Allow()
		return
	}
	<-t.done
	if t.panicked != nil {
		panic(t.panicked)
	}
	if !t.allowLoaded {
		t.allowErr = errLoaderEnded
	}
	if !t.vendorLoaded {
		t.vendorErr = errLoaderEnded
	}
}

// LoaderPanic is a panic of a table loader that ran beside the look,
// raised again on the look's goroutine, whose stack no longer shows where
// it happened: Stack does.
type LoaderPanic struct {
	Value any
	Stack []byte
}

func (p *LoaderPanic) Error() string {
	return fmt.Sprintf("in a table loader: %v\n\n%s", p.Value, p.Stack)
}
