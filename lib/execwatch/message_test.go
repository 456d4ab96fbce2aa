package execwatch

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

// hexBytes decodes a dump as the kernel sent it on this machine
// (little-endian x86_64).
func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeFixedBytes(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the dumps are little-endian")
	}
	// Captured from the kernel: an ack (what 0, err 0) answering ack 5
	// (seq is the kernel's per-CPU count, not the request's), and an exit
	// of pid 0x2484, tgid 0x247a with wait status 0.
	ack := hexBytes(t, "01000000 01000000 51020000 06000000 2800 0000 00000000 01000000 159b5bbb010b0000 00000000 00000000 00000000 00000000 00000000 00000000")
	ev, err := Decode(ack)
	if err != nil || ev.Kind != KindAck || ev.Ack != 6 || ev.Err != 0 {
		t.Fatalf("ack: %+v %v", ev, err)
	}
	exit := hexBytes(t, "01000000 01000000 f5020000 00000000 2800 0000 00000080 00000000 df3542bc010b0000 84240000 7a240000 00030000 11000000 01000000 01000000")
	ev, err = Decode(exit)
	// Mono: the kernel's time of the event (timestamp_ns), 12,100 s after
	// that machine's boot.
	if err != nil || ev.Kind != KindExit || ev.PID != 0x2484 || ev.TGID != 0x247a || ev.Status != 768 || ev.Mono != 0x0b01bc4235df {
		t.Fatalf("exit: %+v %v", ev, err)
	}
	if code, sig := ExitStatus(ev.Status); code != 3 || sig != 0 {
		t.Errorf("status 768: code %d signal %d, want 3", code, sig)
	}
	exec := hexBytes(t, "01000000 01000000 f6020000 00000000 2800 0000 02000000 00000000 0000000000000000 10270000 10270000 00000000 00000000 00000000 00000000")
	ev, err = Decode(exec)
	if err != nil || ev.Kind != KindExec || ev.PID != 10000 || ev.TGID != 10000 {
		t.Fatalf("exec: %+v %v", ev, err)
	}
	// Another connector callback, a fork, and short messages.
	if ev, err := Decode(hexBytes(t, "02000000 01000000 00000000 00000000 0000 0000")); err != nil || ev.Kind != KindOther {
		t.Errorf("other callback: %+v %v", ev, err)
	}
	fork := append([]byte{}, exec...)
	fork[20] = 1
	if ev, err := Decode(fork); err != nil || ev.Kind != KindOther {
		t.Errorf("fork: %+v %v", ev, err)
	}
	for _, n := range []int{0, 10, cnMsgLen, cnMsgLen + procEventHdr, cnMsgLen + procEventHdr + 4} {
		b := append([]byte{}, exit[:n]...)
		if n >= cnMsgLen {
			binary.NativeEndian.PutUint16(b[16:], uint16(n-cnMsgLen))
		}
		if _, err := Decode(b); err == nil {
			t.Errorf("%d bytes: no error", n)
		}
	}
	// A length past the datagram.
	long := append([]byte{}, exit...)
	binary.NativeEndian.PutUint16(long[16:], 4000)
	if _, err := Decode(long); err == nil {
		t.Error("len past the data: no error")
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		raw          uint32
		code, signal int
	}{{0, 0, 0}, {256, 1, 0}, {768, 3, 0}, {1024, 4, 0}, {9, 0, 9}, {0x8b, 0, 11}, {15, 0, 15}} {
		if c, s := ExitStatus(tc.raw); c != tc.code || s != tc.signal {
			t.Errorf("%d: %d %d, want %d %d", tc.raw, c, s, tc.code, tc.signal)
		}
	}
}

func TestListenRequest(t *testing.T) {
	b := listenRequest(7, 9, mcastListen, 0)
	want := hexBytes(t, "01000000 01000000 07000000 09000000 0400 0000 01000000")
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 && string(b) != string(want) {
		t.Errorf("listen request % x, want % x", b, want)
	}
	// struct proc_input: the operation, then PROC_EVENT_EXEC|PROC_EVENT_EXIT.
	b = listenRequest(7, 9, mcastListen, wanted)
	want = hexBytes(t, "01000000 01000000 07000000 09000000 0800 0000 01000000 02000080")
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 && string(b) != string(want) {
		t.Errorf("filtered listen request % x, want % x", b, want)
	}
}

func TestFilterKernel(t *testing.T) {
	for release, want := range map[string]bool{
		"6.18.44-fc-v782": true, "6.6.0": true, "6.5.13": false, "5.14.0-570.el9.x86_64": false,
		"7.0": true, "6": false, "": false, "x.y": false,
	} {
		if got := filterKernel(release); got != want {
			t.Errorf("filterKernel(%q) = %v, want %v", release, got, want)
		}
	}
}
