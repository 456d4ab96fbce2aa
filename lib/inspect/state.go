package inspect

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/netns"
)

// ErrTooBig marks a legacy table whose entries exceed MaxLegacyEntriesBytes:
// its state is not fingerprinted, so it never counts as unchanged.
var ErrTooBig = errors.New("legacy table too big to fingerprint")

// State is what tells whether a namespace's rules may have changed since
// it was last read, for a fraction of a read's cost: equal States mean
// equal rules. Gen is the nftables generation (NFT_MSG_GETGEN), which the
// kernel keeps per namespace and bumps at every commit there, iptables-nft's
// and nft's alike. Legacy is a hash of every legacy x_tables table listed
// (ip, ip6, arp): each one's GET_INFO answer and its entries with the
// counters zeroed, because an edit in place (iptables -R with a rule of the
// same size) leaves entry count and size as they were, while traffic
// changes nothing but the counters.
type State struct {
	Gen    uint32
	Legacy [sha256.Size]byte
}

// Generation reads the namespace's nftables generation: one netlink round
// trip, no lock any other process can hold.
func Generation(ctx context.Context, h *netns.Handle) (uint32, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(fallbackBudget)
	}
	n, err := openSession(ctx, h, deadline, 4096)
	if err != nil {
		return 0, err
	}
	defer n.close()
	var gen uint32
	found := false
	err = n.dump(unix.NFT_MSG_GETGEN, 0, unix.AF_UNSPEC, nil, "generation", func(_ byte, b []byte) {
		gen, found = genOf(b)
	})
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("read nftables generation in netns %q: no generation in the answer", h.Path)
	}
	return gen, nil
}

// genOf reads the generation of a NFT_MSG_NEWGEN payload.
func genOf(b []byte) (gen uint32, found bool) {
	eachAttr(b, func(typ uint16, v []byte) {
		if typ == unix.NFTA_GEN_ID && len(v) == 4 {
			gen, found = be32(v), true
		}
	})
	return gen, found
}

// ReadState reads the namespace's State by the context's deadline. The
// legacy part takes the host-wide x_tables mutex, so it is read as
// Options.LegacyInProcess reads tables: on a thread of this process that
// is abandoned at the deadline, at most one outstanding in the process,
// and skipped with ErrLegacyBusy while an abandoned one has not returned.
// It is for long-running daemons only (see Options.LegacyInProcess). Any
// error means the State is not known, and must never be taken as
// unchanged.
func ReadState(ctx context.Context, h *netns.Handle) (State, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(fallbackBudget)
	}
	var st State
	// Before the generation: the x_tables look is the one that may wait,
	// and it waits while the generation is read.
	var sum [sha256.Size]byte
	var look *threadLook
	var fams []legacyFamily
	for _, lf := range legacyFamilies {
		if lf.loaded() {
			fams = append(fams, lf)
		}
	}
	if len(fams) > 0 {
		var err error
		look, err = startThreadLook(h, deadline, func(own *netns.Handle) error {
			return own.Do(func() error {
				s, err := legacySum(fams)
				sum = s
				return err
			})
		})
		if err != nil {
			return State{}, err
		}
	}
	gen, err := Generation(ctx, h)
	if look != nil {
		if lerr := look.wait(h.Path); lerr != nil {
			return State{}, errors.Join(err, lerr)
		}
		// Written by the look before it ended, read after.
		st.Legacy = sum
	}
	if err != nil {
		return State{}, err
	}
	st.Gen = gen
	return st, nil
}

// legacySum hashes the legacy tables of the namespace the calling thread is
// in. Only listed tables are asked (GET_INFO on another name creates it).
func legacySum(fams []legacyFamily) ([sha256.Size]byte, error) {
	h := sha256.New()
	for _, lf := range fams {
		names, err := tableNames("/proc/thread-self/net/" + lf.names)
		if err != nil {
			return [sha256.Size]byte{}, err
		}
		for _, name := range names {
			if err := sumTable(h, lf, name); err != nil {
				return [sha256.Size]byte{}, err
			}
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, nil
}

// statePart is one legacy table's part of State.Legacy: its family, its
// GET_INFO answer (name, hooks, hook entry and underflow offsets, entry
// count, size) and the digest of its entries with every entry's counters
// zeroed (contentDigest). ReadState and an in-process look
// (Snapshot.State) hash the same parts, so the State a scan read and a
// later ReadState compare.
func statePart(fam Family, info []byte, entries [sha256.Size]byte) []byte {
	part := make([]byte, 0, len(fam)+1+len(info)+len(entries))
	part = append(append(append(part, fam...), 0), info...)
	return append(part, entries[:]...)
}

// sumTable adds one table's statePart to h, read as a look reads it
// (getInfo, readEntries) but for the bound: a table over
// MaxLegacyEntriesBytes has no State (ErrTooBig), where a look reads its
// first part. The table may be replaced between GET_INFO and GET_ENTRIES:
// the kernel then refuses the entries (EAGAIN, the size differs), and the
// read is tried again, a few times.
func sumTable(h hash.Hash, lf legacyFamily, name string) error {
	for try := 0; ; try++ {
		_, info, err := getInfo(lf, name)
		if err != nil {
			return err
		}
		if info.size > MaxLegacyEntriesBytes {
			return fmt.Errorf("legacy %s table %q of %d bytes: %w", lf.fam, name, info.size, ErrTooBig)
		}
		blob, _, err := readEntries(lf, name, info.size)
		if errors.Is(err, unix.EAGAIN) && try < 3 {
			continue
		}
		if err != nil {
			return fmt.Errorf("get entries of legacy %s table %q: %w", lf.fam, name, err)
		}
		h.Write(statePart(lf.fam, info.raw, contentDigest(blob, lf.fam)))
		return nil
	}
}

// zeroCounters zeroes every entry's packet and byte counters, the only part
// of a table traffic changes (a match's own state lies beyond the part the
// kernel copies out, its usersize). Offsets come from the kernel's blob and
// are checked against it.
func zeroCounters(entries []byte, lay entryLayout) {
	const counters = 16 // struct xt_counters: pcnt, bcnt
	for off := 0; off+lay.counters+counters <= len(entries); {
		clear(entries[off+lay.counters : off+lay.counters+counters])
		next := int(binary.NativeEndian.Uint16(entries[off+lay.targetOffset+2:]))
		if next == 0 {
			return
		}
		off += next
	}
}
