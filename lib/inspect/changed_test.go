package inspect

import (
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// nlMsg builds one netlink message of request seq with an nfgenmsg and no
// attributes.
func nlMsg(typ, flags uint16, seq uint32) []byte {
	b := make([]byte, 20)
	binary.NativeEndian.PutUint32(b[0:4], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:6], typ)
	binary.NativeEndian.PutUint16(b[6:8], flags)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	b[16] = unix.NFPROTO_IPV4
	return b
}

// A dump's message the kernel flagged NLM_F_DUMP_INTR (the ruleset changed
// between two of its batches) makes the dump incomplete, on a rule as on
// the closing NLMSG_DONE: a rule may be missing while every chain's count
// is right. It was read as any other message, and the look as complete.
func TestDumpInterruptedIsIncomplete(t *testing.T) {
	const seq = 7
	rule := uint16(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE)
	for _, tc := range []struct {
		name  string
		batch [][]byte
	}{
		{"rule", [][]byte{nlMsg(rule, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, seq)}},
		{"done", [][]byte{nlMsg(rule, unix.NLM_F_MULTI, seq), nlMsg(unix.NLMSG_DONE, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, seq)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b []byte
			for _, m := range tc.batch {
				b = append(b, m...)
			}
			done, err := eachMessage(b, seq, func(byte, []byte) {})
			if !done || !errors.Is(err, ErrIncomplete) {
				t.Fatalf("done=%v err=%v, want done and ErrIncomplete", done, err)
			}
		})
	}
	// Unflagged, the same messages are a dump going on.
	done, err := eachMessage(nlMsg(rule, unix.NLM_F_MULTI, seq), seq, func(byte, []byte) {})
	if done || err != nil {
		t.Fatalf("unflagged: done=%v err=%v, want the dump going on", done, err)
	}
}
