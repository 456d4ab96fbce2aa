package inspect

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// Legacy x_tables "get info" socket options (linux/netfilter_ipv4/ip_tables.h,
// ip6_tables.h, arp_tables.h).
const (
	iptSoGetInfo  = 64 // IPT_SO_GET_INFO at SOL_IP
	ip6tSoGetInfo = 64 // IP6T_SO_GET_INFO at SOL_IPV6
	arptSoGetInfo = 96 // ARPT_SO_GET_INFO at SOL_IP
	// *_SO_GET_ENTRIES follow GET_INFO in each family.
	soGetEntries = 1
)

type legacyFamily struct {
	fam    Family
	names  string // file under /proc/thread-self/net
	domain int
	level  int
	opt    int
	hooks  int // number of hook slots in the getinfo struct
}

var legacyFamilies = []legacyFamily{
	{IP, "ip_tables_names", unix.AF_INET, unix.SOL_IP, iptSoGetInfo, 5},
	{IP6, "ip6_tables_names", unix.AF_INET6, unix.SOL_IPV6, ip6tSoGetInfo, 5},
	{ARP, "arp_tables_names", unix.AF_INET, unix.SOL_IP, arptSoGetInfo, 3},
}

// Bounds of the entries read: the copy of the table is made under the
// host-wide x_tables mutex, and a hostile pod chooses its size. The rules
// handed on, all tables of a look together, are bounded like the nftables
// rules kept in detail (defaultMaxDetail, defaultMaxDetailBytes): each
// goes over the probe's pipe and is rendered. Every entry is counted
// (LegacyTable.Entries) whatever these bounds keep.
const (
	// MaxLegacyEntriesBytes is exported for the text that says a table
	// was cut.
	MaxLegacyEntriesBytes = 4 << 20
	maxLegacyChains       = 64
	maxLegacyRules        = 1024
	maxLegacyRuleBytes    = 1 << 20
)

// loaded reports whether the family's x_tables module is loaded (or built
// in): its /proc/net entry exists then, in every namespace. A stat takes no
// x_tables lock, unlike reading the file. (/sys/module/ip_tables would do
// for a module but is absent for a built-in one without parameters.)
func (lf legacyFamily) loaded() bool {
	_, err := os.Stat("/proc/self/net/" + lf.names)
	return !errors.Is(err, os.ErrNotExist)
}

// sysModule is where the kernel lists its loaded modules (a variable for
// tests).
var sysModule = "/sys/module"

// LegacyAbsent tells whether the kernel has no legacy x_tables module of
// the family loaded (ip_tables, ip6_tables, arp_tables; ebtables for
// Bridge), with nothing taking the x_tables lock: a legacy tool that just
// ran would have had it loaded (module autoload), so on a RHEL 10 node,
// which ships none, its absence is why the tool failed. False when it
// cannot tell: ebtables has no /proc/net file, so it is read in
// /sys/module, and a /sys without one (not mounted) tells nothing; a
// built-in ebtables without parameters is absent from it too, and reads
// as absent (distribution kernels build it as a module).
func LegacyAbsent(fam Family) bool {
	for _, lf := range legacyFamilies {
		if lf.fam == fam {
			return !lf.loaded()
		}
	}
	if fam != Bridge {
		return false
	}
	if _, err := os.Stat(sysModule); err != nil {
		return false
	}
	_, err := os.Stat(sysModule + "/ebtables")
	return errors.Is(err, os.ErrNotExist)
}

// legacySink takes a look's answer: a table's rules, in order, then the
// table itself, and, if state is set, after each table its part of
// State.Legacy (statePart), nil when its entries were not read whole.
type legacySink struct {
	table func(LegacyTable)
	rule  func(LegacyRule)
	state func(part []byte)
}

// readLegacy lists the legacy tables of the namespace and asks each for its
// entry count, reads its entries, and hands each rule (up to maxLegacyRules and
// maxLegacyRuleBytes) and each table to sink as they are read. It needs the
// namespace's own view of /proc/net and sockets created inside it, hence
// the locked thread of Do. It can block in the kernel for as long as
// another process holds the x_tables mutex, uninterruptibly: run it where
// nothing has to wait for it (the probe process).
func readLegacy(h *netns.Handle, fams []legacyFamily, sink legacySink) error {
	rules, bytes := 0, 0
	rule := func(r LegacyRule) bool {
		n := len(r.Head) + len(r.Target.Data) + len(r.Chain)
		for _, m := range r.Matches {
			n += len(m.Data)
		}
		if rules >= maxLegacyRules || bytes+n > maxLegacyRuleBytes {
			return false
		}
		rules, bytes = rules+1, bytes+n
		sink.rule(r)
		return true
	}
	return h.Do(func() error {
		var errs []error
		for _, lf := range fams {
			names, err := tableNames("/proc/thread-self/net/" + lf.names)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, name := range names {
				t, info, err := getInfo(lf, name)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				// An untouched table is read too: its entries are its
				// built-in chains' policies, and a drop policy set
				// alone (iptables-legacy -P INPUT DROP) adds none.
				part := walkTable(lf, &t, info, rule)
				sink.table(t)
				if sink.state != nil {
					sink.state(part)
				}
			}
		}
		return errors.Join(errs...)
	})
}

// tableNames reads a *_tables_names file. A missing file means the module
// is not loaded: no legacy table can exist, which is an answer, not an error.
func tableNames(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read legacy table names %q: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read legacy table names %q: %w", path, err)
	}
	return parseTableNames(b), nil
}

// parseTableNames gives the names a *_tables_names file lists, one a line.
func parseTableNames(b []byte) []string {
	var names []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		// The kernel's name field is 32 bytes with its NUL.
		if len(l) > 0 && len(l) < 32 {
			names = append(names, string(l))
		}
	}
	return names
}

// getInfo asks the kernel for a listed table's info, the size of its
// entries and its built-in chains' offsets. Only listed names are asked: GET_INFO on any other name loads
// and creates that table.
func getInfo(lf legacyFamily, name string) (LegacyTable, legacyInfo, error) {
	fd, err := unix.Socket(lf.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return LegacyTable{}, legacyInfo{}, fmt.Errorf("open socket for legacy %s table %q: %w", lf.fam, name, err)
	}
	defer unix.Close(fd)
	// struct {ip,ip6,arp}t_getinfo: name[32], valid_hooks, hook_entry[n],
	// underflow[n], num_entries, size; all u32 in host order.
	buf := make([]byte, 32+4+8*lf.hooks+8)
	copy(buf, name)
	l := uint32(len(buf))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(lf.level), uintptr(lf.opt),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return LegacyTable{}, legacyInfo{}, fmt.Errorf("get info of legacy %s table %q: %w", lf.fam, name, errno)
	}
	u32 := func(off int) uint32 { return binary.NativeEndian.Uint32(buf[off:]) }
	info := legacyInfo{size: u32(32 + 4 + 8*lf.hooks + 4), raw: buf}
	info.hooks.valid = u32(32)
	for h := 0; h < lf.hooks; h++ {
		info.hooks.entry = append(info.hooks.entry, u32(36+4*h))
		info.hooks.underflow = append(info.hooks.underflow, u32(36+4*lf.hooks+4*h))
	}
	return LegacyTable{
		Family:  lf.fam,
		Name:    name,
		Hooks:   info.hooks.valid,
		Entries: u32(32 + 4 + 8*lf.hooks),
	}, info, nil
}

// legacyInfo is what GET_INFO tells of a table besides LegacyTable: the
// size of its entries and where its built-in chains are.
type legacyInfo struct {
	size  uint32
	hooks tableHooks
	// raw is the GET_INFO answer as the kernel gave it, for State.
	raw []byte
}

// readEntries reads a listed table's entries, size bytes by GET_INFO, of
// which at most MaxLegacyEntriesBytes: the kernel copies a table only
// whole, under the host-wide x_tables mutex, into a buffer of exactly its
// size. A table within the bound is read into the heap; for a larger one
// the buffer is that size of address space but only its first
// MaxLegacyEntriesBytes are memory; the rest is mapped PROT_NONE, the
// kernel's copy faults there (EFAULT) and stops, and what it copied
// before is read. cut is set then. EAGAIN (the table changed since
// GET_INFO) is the caller's to retry.
func readEntries(lf legacyFamily, name string, size uint32) (blob []byte, cut bool, err error) {
	fd, err := unix.Socket(lf.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, false, err
	}
	defer unix.Close(fd)
	// struct {ip,ip6,arp}t_get_entries: name[32], size u32, then the
	// entries, aligned as their u64 counters are.
	hdr := (32 + 4 + int(unsafe.Alignof(uint64(0))) - 1) &^ (int(unsafe.Alignof(uint64(0))) - 1)
	total := hdr + int(size)
	buf, usable := []byte(nil), total
	if size <= MaxLegacyEntriesBytes {
		// A mapping of its own costs a small table more than its read
		// (mmap, mprotect, the first touch's faults, munmap).
		buf = make([]byte, total)
	} else {
		page := unix.Getpagesize()
		mapped := (total + page - 1) &^ (page - 1)
		buf, err = unix.Mmap(-1, 0, mapped, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			return nil, false, err
		}
		defer unix.Munmap(buf)
		usable = min(total, (hdr+MaxLegacyEntriesBytes+page-1)&^(page-1))
		if err := unix.Mprotect(buf[:usable], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return nil, false, err
		}
	}
	copy(buf, name)
	binary.NativeEndian.PutUint32(buf[32:], size)
	l := uint32(total)
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(lf.level), uintptr(lf.opt+soGetEntries),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	switch {
	case errno == unix.EFAULT && usable < total:
		cut = true
	case errno != 0:
		return nil, false, errno
	}
	if size <= MaxLegacyEntriesBytes {
		return buf[hdr:], false, nil
	}
	// The mapping goes at return.
	return clone(buf[hdr:usable]), cut, nil
}

// walkTable reads a table's entries and hands its rules to rule until rule
// returns false; it fills t's user chains and says whether t was cut (not
// every rule handed on). A table that keeps changing between GET_INFO and
// GET_ENTRIES is cut. It returns the table's part of State.Legacy
// (statePart), nil when the entries were not read whole.
func walkTable(lf legacyFamily, t *LegacyTable, info legacyInfo, rule func(LegacyRule) bool) []byte {
	for try := 0; ; try++ {
		blob, cut, err := readEntries(lf, t.Name, info.size)
		if errors.Is(err, unix.EAGAIN) && try < 2 {
			var again LegacyTable
			if again, info, err = getInfo(lf, t.Name); err == nil {
				*t = again
				continue
			}
		}
		if err != nil {
			t.Cut = true
			return nil
		}
		chains, complete := walkEntries(lf.fam, t.Name, blob, info.hooks, rule)
		t.Cut = cut || !complete
		digest := contentDigest(blob, lf.fam)
		t.Sum = binary.NativeEndian.Uint64(digest[:8])
		var part []byte
		// ReadState takes no table over the bound (ErrTooBig) either.
		if !cut && info.size <= MaxLegacyEntriesBytes {
			part = statePart(lf.fam, info.raw, digest)
		}
		t.Chains = nil
		for _, c := range chains {
			if !c.Builtin && len(t.Chains) < maxLegacyChains {
				t.Chains = append(t.Chains, c.Name)
			}
			if c.Builtin && c.Policy != "ACCEPT" {
				t.Policies = append(t.Policies, c)
			}
		}
		return part
	}
}

// contentDigest hashes a table's entries with their counters zeroed (in
// blob): LegacyTable.Sum is its first 8 bytes, State.Legacy takes it all.
func contentDigest(blob []byte, fam Family) [sha256.Size]byte {
	zeroCounters(blob, entryLayouts[fam])
	return sha256.Sum256(blob)
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
