package inspect

import (
	"bufio"
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
				t, err := getInfo(lf, name)
				if err != nil {
					errs = append(errs, err)
					continue
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

// getInfo asks the kernel for a listed table's info. Only listed names are
// asked: GET_INFO on any other name loads and creates that table.
func getInfo(lf legacyFamily, name string) (LegacyTable, error) {
	fd, err := unix.Socket(lf.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return LegacyTable{}, fmt.Errorf("open socket for legacy %s table %q: %w", lf.fam, name, err)
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
		return LegacyTable{}, fmt.Errorf("get info of legacy %s table %q: %w", lf.fam, name, errno)
	}
	u32 := func(off int) uint32 { return *(*uint32)(unsafe.Pointer(&buf[off])) }
	return LegacyTable{
		Family:  lf.fam,
		Name:    name,
		Hooks:   u32(32),
		Entries: u32(32 + 4 + 8*lf.hooks),
	}, nil
}
