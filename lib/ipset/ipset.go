package ipset

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/child"
	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// ErrBusy marks names not read by the deadline: another process held
// ipset's mutex.
var ErrBusy = errors.New("ipset busy")

// Kernel interface (linux/netfilter/ipset/ip_set.h): a getsockopt at the
// IP level on any IPv4 socket of the netns.
const (
	soIPSet         = 83 // SO_IP_SET
	opGetByIndex    = 7  // IP_SET_OP_GET_BYINDEX
	protocolVersion = 7  // IPSET_PROTOCOL; the kernel takes >= 6
	maxName         = 32 // IPSET_MAXNAMELEN
)

// reqGetSet is struct ip_set_req_get_set: op, version, then a union of the
// name and the u16 index.
type reqGetSet struct {
	op, version uint32
	set         [maxName]byte
}

// lookup asks the kernel for the name at each index, in the current
// thread's netns. An index with no set gives no entry.
func lookup(ids []uint16, emit func(uint16, string)) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open socket for ipset: %w", err)
	}
	defer unix.Close(fd)
	for _, id := range ids {
		req := reqGetSet{op: opGetByIndex, version: protocolVersion}
		*(*uint16)(unsafe.Pointer(&req.set[0])) = id
		size := uint32(unsafe.Sizeof(req))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_IP, soIPSet,
			uintptr(unsafe.Pointer(&req)), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case e == unix.EINVAL:
			continue // beyond the netns's set table: no such set
		case e != 0:
			return fmt.Errorf("get ipset name of index %d: %w", id, e)
		}
		name := req.set[:]
		if i := strings.IndexByte(string(name), 0); i >= 0 {
			name = name[:i]
		}
		if len(name) > 0 {
			emit(id, string(name))
		}
	}
	return nil
}

// Probe reads set names in a child process, so a read blocked on ipset's
// mutex is abandoned at the deadline. A main that lets Names run lists it
// in child.Main.
var Probe = child.NewProbe("ipset-probe", probe)

// probe is the child: "index name" lines on stdout, "." when done.
func probe(nsf *os.File, args []string) int {
	var ids []uint16
	for _, a := range args {
		id, err := strconv.ParseUint(a, 10, 16)
		if err != nil {
			return 2
		}
		ids = append(ids, uint16(id))
	}
	h, err := netns.FromFile(nsf, "fd 3")
	if err != nil {
		fmt.Printf("! %s\n", strconv.Quote(err.Error()))
		return 0
	}
	w := bufio.NewWriter(os.Stdout)
	err = h.Do(func() error {
		return lookup(ids, func(id uint16, name string) { fmt.Fprintf(w, "%d %s\n", id, strconv.Quote(name)) })
	})
	if err != nil {
		fmt.Fprintf(w, "! %s\n", strconv.Quote(err.Error()))
	}
	fmt.Fprintln(w, ".")
	w.Flush()
	return 0
}

// Names reads the names of the sets at ids in the netns of h, by the
// deadline. What was read before an error or the deadline is returned with
// it; an index with no set is absent from the map.
func Names(h *netns.Handle, ids []uint16, deadline time.Time) (map[uint16]string, error) {
	names := map[uint16]string{}
	if len(ids) == 0 {
		return names, nil
	}
	if !child.Wired() {
		err := h.Do(func() error { return lookup(ids, func(id uint16, n string) { names[id] = n }) })
		return names, err
	}
	var args []string
	for _, id := range ids {
		args = append(args, strconv.Itoa(int(id)))
	}
	proc, err := child.Start(Probe, h, deadline, args)
	if err != nil {
		return names, fmt.Errorf("start ipset probe: %w", err)
	}
	answered := false
	defer func() { proc.End(answered) }()
	sc := proc.Lines
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == ".":
			answered = true
			return names, nil
		case strings.HasPrefix(line, "! "):
			answered = true
			msg, _ := strconv.Unquote(line[2:])
			return names, fmt.Errorf("read ipset names: %s", msg)
		}
		idText, quoted, ok := strings.Cut(line, " ")
		id, err := strconv.ParseUint(idText, 10, 16)
		name, qerr := strconv.Unquote(quoted)
		if !ok || err != nil || qerr != nil {
			return names, fmt.Errorf("read ipset probe: bad line %q", line)
		}
		names[uint16(id)] = name
	}
	if errors.Is(sc.Err(), os.ErrDeadlineExceeded) {
		return names, fmt.Errorf("read ipset names: %w", ErrBusy)
	}
	if err := sc.Err(); err != nil {
		return names, fmt.Errorf("read ipset probe: %w", err)
	}
	return names, errors.New("read ipset probe: ended without an answer")
}
