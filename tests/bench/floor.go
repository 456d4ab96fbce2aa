package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// The nftables requests of the floor (linux/netfilter/nf_tables.h): the
// objects iptables-nft-save and the agent's scan both need, tables,
// chains, sets and rules, in that order.
var floorDumps = []uint16{1 /* NFT_MSG_GETTABLE */, 4 /* GETCHAIN */, 10 /* GETSET */, 7 /* GETRULE */}

// dumpFloor is the least CPU any reader can spend on these netns: one
// thread enters each in turn and asks the kernel for every nftables
// object by netlink dumps, reading each message and decoding none. The
// thread's own CPU (user and system, the kernel's dump work included)
// is the floor the agent's sweep is compared with: what the sweep spends
// above it is the agent's own work (decoding, classifying, the findings
// file). Legacy x_tables are left out: the sweep's netns hold none.
func dumpFloor(netns []string) (time.Duration, error) {
	type result struct {
		cpu time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread leaves the host's netns, so it ends
		// with this goroutine instead of serving others.
		runtime.LockOSThread()
		var before unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
			done <- result{err: err}
			return
		}
		for _, ns := range netns {
			if err := dumpNetns(ns); err != nil {
				done <- result{err: fmt.Errorf("%s: %w", ns, err)}
				return
			}
		}
		var after unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &after); err != nil {
			done <- result{err: err}
			return
		}
		used := time.Duration(after.Utime.Nano()+after.Stime.Nano()) - time.Duration(before.Utime.Nano()+before.Stime.Nano())
		done <- result{cpu: used}
	}()
	r := <-done
	return r.cpu, r.err
}

// dumpNetns enters /run/netns/ns on this locked thread and reads every
// nftables dump there to its end.
func dumpNetns(ns string) error {
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return err
	}
	err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
	f.Close()
	if err != nil {
		return fmt.Errorf("setns: %w", err)
	}
	// Opened after setns: a netlink socket belongs to the netns it was
	// made in.
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for seq, t := range floorDumps {
		// nlmsghdr (16 bytes) + nfgenmsg (family AF_UNSPEC, version 0,
		// res_id 0: every family's objects).
		req := make([]byte, 20)
		binary.NativeEndian.PutUint32(req[0:], 20)
		binary.NativeEndian.PutUint16(req[4:], 10<<8|t) // NFNL_SUBSYS_NFTABLES
		binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
		binary.NativeEndian.PutUint32(req[8:], uint32(seq+1))
		if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return err
		}
		if err := readDump(fd, buf); err != nil {
			return err
		}
	}
	return nil
}

// readDump reads datagrams until the dump's NLMSG_DONE (or its error).
func readDump(fd int, buf []byte) error {
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		for off := 0; off+16 <= n; {
			l := int(binary.NativeEndian.Uint32(buf[off:]))
			switch binary.NativeEndian.Uint16(buf[off+4:]) {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if off+20 <= n {
					if code := int32(binary.NativeEndian.Uint32(buf[off+16:])); code != 0 {
						return fmt.Errorf("nftables dump: %w", unix.Errno(-code))
					}
				}
				return nil
			}
			if l < 16 {
				return fmt.Errorf("nftables dump: message length %d", l)
			}
			off += (l + 3) &^ 3
		}
	}
}
