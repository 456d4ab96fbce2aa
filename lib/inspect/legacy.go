package inspect

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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
	// targetOffset is where an entry's u16 target_offset is (next_offset
	// follows), 0 where chain names are not read (arp).
	targetOffset int
	// nextOffset and countersOffset are where every entry's u16
	// next_offset and struct xt_counters are, for the state's hash.
	nextOffset, countersOffset int
}

var legacyFamilies = []legacyFamily{
	// struct ipt_entry: struct ipt_ip (84 bytes), nfcache, target_offset,
	// next_offset, comefrom, counters (at 96, u64 aligned).
	{IP, "ip_tables_names", unix.AF_INET, unix.SOL_IP, iptSoGetInfo, 5, 88, 90, 96},
	// struct ip6t_entry: struct ip6t_ip6 (136 bytes), nfcache, target_offset,
	// next_offset, comefrom, counters (at 152).
	{IP6, "ip6_tables_names", unix.AF_INET6, unix.SOL_IPV6, ip6tSoGetInfo, 5, 140, 142, 152},
	// struct arpt_entry: struct arpt_arp (164 bytes), target_offset,
	// next_offset, comefrom, counters (at 176).
	{ARP, "arp_tables_names", unix.AF_INET, unix.SOL_IP, arptSoGetInfo, 3, 0, 166, 176},
}

// Bounds of the chain-name read: the copy of the table is made under the
// host-wide x_tables mutex, and a hostile pod chooses its size.
const (
	maxLegacyEntriesBytes = 4 << 20
	maxLegacyChains       = 64
)

// loaded reports whether the family's x_tables module is loaded (or built
// in): its /proc/net entry exists then, in every namespace. A stat takes no
// x_tables lock, unlike reading the file. (/sys/module/ip_tables would do
// for a module but is absent for a built-in one without parameters.)
func (lf legacyFamily) loaded() bool {
	_, err := os.Stat("/proc/self/net/" + lf.names)
	return !errors.Is(err, os.ErrNotExist)
}

// readLegacy lists the legacy tables of the namespace and asks each for its
// entry count, handing each table to emit as it is read. It needs the
// namespace's own view of /proc/net and sockets created inside it, hence
// the locked thread of Do. It can block in the kernel for as long as
// another process holds the x_tables mutex, uninterruptibly: run it where
// nothing has to wait for it (the probe process).
func readLegacy(h *netns.Handle, fams []legacyFamily, emit func(LegacyTable)) error {
	return h.Do(func() error {
		var errs []error
		for _, lf := range fams {
			names, err := tableNames("/proc/thread-self/net/" + lf.names)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, name := range names {
				t, size, err := getInfo(lf, name)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if lf.targetOffset > 0 && t.Entries > t.Untouched() && size <= maxLegacyEntriesBytes {
					// The names only help name a vendor: a table that
					// changed since GET_INFO (EAGAIN) simply has none.
					t.Chains, _ = userChains(lf, name, size)
				}
				emit(t)
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
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// The kernel's name field is 32 bytes with its NUL.
		if n := sc.Text(); n != "" && len(n) < 32 {
			names = append(names, n)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read legacy table names %q: %w", path, err)
	}
	return names, nil
}

// getInfo asks the kernel for a listed table's info, and the size of its
// entries. Only listed names are asked: GET_INFO on any other name loads
// and creates that table.
func getInfo(lf legacyFamily, name string) (LegacyTable, uint32, error) {
	fd, err := unix.Socket(lf.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return LegacyTable{}, 0, fmt.Errorf("open socket for legacy %s table %q: %w", lf.fam, name, err)
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
		return LegacyTable{}, 0, fmt.Errorf("get info of legacy %s table %q: %w", lf.fam, name, errno)
	}
	u32 := func(off int) uint32 { return *(*uint32)(unsafe.Pointer(&buf[off])) }
	return LegacyTable{
		Family:  lf.fam,
		Name:    name,
		Hooks:   u32(32),
		Entries: u32(32 + 4 + 8*lf.hooks),
	}, u32(32 + 4 + 8*lf.hooks + 4), nil
}

// userChains reads a listed table's entries (size bytes, from GET_INFO) and
// returns the names of its user-defined chains: each starts with an entry
// whose target is ERROR holding the chain's name (the table's last entry
// is an ERROR named "ERROR").
func userChains(lf legacyFamily, name string, size uint32) ([]string, error) {
	fd, err := unix.Socket(lf.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// struct {ip,ip6}t_get_entries: name[32], size u32, then the entries,
	// aligned as their u64 counters are.
	hdr := (32 + 4 + int(unsafe.Alignof(uint64(0))) - 1) &^ (int(unsafe.Alignof(uint64(0))) - 1)
	buf := make([]byte, hdr+int(size))
	copy(buf, name)
	binary.NativeEndian.PutUint32(buf[32:], size)
	l := uint32(len(buf))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(lf.level), uintptr(lf.opt+soGetEntries),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
	if errno != 0 {
		return nil, errno
	}
	return chainNames(buf[hdr:], lf.targetOffset), nil
}

// chainNames walks x_tables entries and collects the ERROR targets' names.
// The kernel made the blob, but it is walked as untrusted all the same:
// every offset is checked against the buffer.
func chainNames(entries []byte, targetOffset int) []string {
	const (
		targetName = 2  // struct xt_entry_target: u16 target_size, name[29], revision
		nameLen    = 29 // XT_EXTENSION_MAXNAMELEN
		targetHdr  = 32
		errorLen   = 30 // XT_FUNCTION_MAXNAMELEN, struct xt_error_target's errorname
	)
	u16 := func(off int) int { return int(binary.NativeEndian.Uint16(entries[off:])) }
	var names []string
	for off := 0; off+targetOffset+4 <= len(entries) && len(names) < maxLegacyChains; {
		to, next := u16(off+targetOffset), u16(off+targetOffset+2)
		t := off + to
		if next == 0 || t+targetHdr+errorLen > len(entries) || off+next > len(entries) {
			if next == 0 {
				break
			}
			off += next
			continue
		}
		if cstring(entries[t+targetName:t+targetName+nameLen]) == "ERROR" {
			if n := cstring(entries[t+targetHdr : t+targetHdr+errorLen]); n != "ERROR" && n != "" {
				names = append(names, n)
			}
		}
		off += next
	}
	return names
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
