package execwatch

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/execquiet"
	"github.com/iptables-alerter/iptables-alerter/internal/procstat"
	"github.com/iptables-alerter/iptables-alerter/internal/safetext"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
	"github.com/iptables-alerter/iptables-alerter/lib/watch"
)

// Bounds of what is read of one tool's command line: the pod chooses it.
const (
	// maxCmdline is read of /proc/PID/cmdline; a longer one is cut and
	// Command.ArgvCut set.
	maxCmdline = execquiet.MaxCmdline
	// MaxArgs and MaxArg bound Command.Argv.
	MaxArgs = 64
	MaxArg  = 256
)

// procFile reads at most len(buf) bytes of a /proc file into buf, without
// following links: the few syscalls of one small read, as this runs for
// every exec on the node.
func procFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}

// comm is the process's kernel name, /proc/PID/comm without its newline.
func comm(root string, pid int) (string, error) {
	var b [32]byte
	c, err := procFile(root+"/"+strconv.Itoa(pid)+"/comm", b[:])
	if err != nil {
		return "", err
	}
	return parseComm(c), nil
}

func parseComm(b []byte) string { return string(bytes.TrimSuffix(b, []byte("\n"))) }

// exe is the binary the process runs (/proc/PID/exe's target; reading it
// needs the process's uid or CAP_SYS_PTRACE).
func exe(root string, pid int) (string, error) {
	return readlink(root + "/" + strconv.Itoa(pid) + "/exe")
}

// readlink reads a link's target of at most 511 bytes. A longer one is
// cut by the kernel without an error: it is ENAMETOOLONG here, so that a
// tool at a long path is judged by its name (exec), not dropped for
// what its cut path names.
func readlink(path string) (string, error) {
	var b [512]byte
	n, err := unix.Readlink(path, b[:])
	if err != nil {
		return "", err
	}
	if n == len(b) {
		return "", unix.ENAMETOOLONG
	}
	return string(b[:n]), nil
}

// cmdline reads the process's argv, bounded: at most maxCmdline bytes, then
// at most MaxArgs arguments of at most MaxArg bytes each (valid UTF-8);
// cut tells whether anything was left out. The JSON encoding escapes what
// is left of control characters.
func cmdline(root string, pid int) (argv []string, cut argvCut, err error) {
	buf := make([]byte, maxCmdline+1)
	b, err := procFile(root+"/"+strconv.Itoa(pid)+"/cmdline", buf)
	if err != nil {
		return nil, 0, err
	}
	return parseCmdline(b)
}

// argvCut says how a command line was cut: arguments shortened (past
// MaxArg), arguments left out (past MaxArgs or maxCmdline, or the end of
// a cluster of short options shortened), or both.
type argvCut int

const (
	argShortened argvCut = 1 << iota
	argsLeftOut
)

// parseCmdline is cmdline's reading of the file's bytes (at most
// maxCmdline+1: more than maxCmdline is cut).
func parseCmdline(b []byte) (argv []string, cut argvCut, err error) {
	if len(b) > maxCmdline {
		b, cut = b[:maxCmdline], argsLeftOut
	}
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		// A kernel thread, or a process that ended its argv itself.
		return nil, cut, errNoArgv
	}
	for _, a := range bytes.Split(b, []byte{0}) {
		if len(argv) == MaxArgs {
			cut |= argsLeftOut
			break
		}
		s := string(a)
		if len(s) > MaxArg {
			s, cut = safetext.Cut(s, MaxArg), cut|argShortened
			if len(a) > 1 && a[0] == '-' && a[1] != '-' {
				// A cluster of short options (-vvv...A): its cut end
				// may hold the command.
				cut |= argsLeftOut
			}
		} else {
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		argv = append(argv, s)
	}
	return argv, cut, nil
}

var errNoArgv = errors.New("empty command line")

// netnsInode is the inode of the process's network namespace
// (/proc/PID/ns/net reads "net:[INODE]").
func netnsInode(root string, pid int) (uint64, error) {
	l, err := readlink(root + "/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return 0, err
	}
	return parseNetns(l)
}

func parseNetns(l string) (uint64, error) {
	v, ok := strings.CutPrefix(l, "net:[")
	if v, ok2 := strings.CutSuffix(v, "]"); ok && ok2 {
		return strconv.ParseUint(v, 10, 64)
	}
	return 0, errors.New("unexpected netns link " + strconv.Quote(l))
}

// errRunning: the process has not ended.
var errRunning = errors.New("running")

// zombieStatus is the wait status of a process that ended and is not
// reaped yet (state Z: the exit_code field of /proc/PID/stat, its 52nd);
// errRunning while it runs, the open's error when it is gone. start is
// the process's start time (field 22), read with it: the pid's process
// may not be the one the caller knew.
func zombieStatus(root string, pid int) (raw uint32, start string, err error) {
	var b [1024]byte
	st, err := procFile(root+"/"+strconv.Itoa(pid)+"/stat", b[:])
	if err != nil {
		return 0, "", err
	}
	s, err := procstat.Parse(st)
	if err != nil {
		return 0, "", err
	}
	if s.Field(3) != "Z" || s.Field(52) == "" {
		return 0, s.Field(22), errRunning
	}
	v, err := strconv.ParseUint(s.Field(52), 10, 32)
	return uint32(v), s.Field(22), err
}

// startTime is the process's start time (stat's field 22), "" when it
// cannot be read.
func startTime(root string, pid int) string {
	var b [1024]byte
	st, err := procFile(root+"/"+strconv.Itoa(pid)+"/stat", b[:])
	if err != nil {
		return ""
	}
	return procstat.Of(st).Field(22)
}

// proc reads one process's files for the exec watch: from the quiet
// path's snapshot when it read that process as its exec arrived (the
// command may have ended since), else from /proc now.
type proc struct {
	root string
	pid  int
	snap *execquiet.Snapshot
}

func procOf(root string, pid int, snap *execquiet.Snapshot) proc {
	if snap == nil || snap.PID != pid {
		snap = nil
	}
	return proc{root: root, pid: pid, snap: snap}
}

// file is one of the snapshot's files, or its error.
func file(f *execquiet.File) ([]byte, error) {
	if f.Err != 0 {
		return nil, f.Err
	}
	return f.Bytes(), nil
}

func (p proc) exe() (string, error) {
	if p.snap == nil {
		return exe(p.root, p.pid)
	}
	b, err := file(&p.snap.Exe)
	return string(b), err
}

func (p proc) comm() (string, error) {
	if p.snap == nil {
		return comm(p.root, p.pid)
	}
	b, err := file(&p.snap.Comm)
	if err != nil {
		return "", err
	}
	return parseComm(b), nil
}

func (p proc) cmdline() ([]string, argvCut, error) {
	if p.snap == nil {
		return cmdline(p.root, p.pid)
	}
	b, err := file(&p.snap.Cmdline)
	if err != nil {
		return nil, 0, err
	}
	return parseCmdline(b)
}

func (p proc) netns() (uint64, error) {
	if p.snap == nil {
		return netnsInode(p.root, p.pid)
	}
	b, err := file(&p.snap.Netns)
	if err != nil {
		return 0, err
	}
	return parseNetns(string(b))
}

// capNetAdmin is CAP_NET_ADMIN's bit (linux/capability.h).
const capNetAdmin = 12

// noNetAdmin tells whether the process's effective capabilities lack
// CAP_NET_ADMIN (status's CapEff): its tool's refusals are then the
// kernel's "Permission denied", not missing kernel support. False when
// unknown (unread, or the line past what is read: see
// execquiet.MaxStatus).
func (p proc) noNetAdmin() bool {
	var b []byte
	if p.snap == nil {
		buf := make([]byte, execquiet.MaxStatus)
		b, _ = procFile(p.root+"/"+strconv.Itoa(p.pid)+"/status", buf)
	} else {
		b, _ = file(&p.snap.Status)
	}
	return lacksNetAdmin(b)
}

// lacksNetAdmin reads status's CapEff line (hex): false when it is not
// there whole.
func lacksNetAdmin(status []byte) bool {
	_, v, ok := bytes.Cut(status, []byte("\nCapEff:\t"))
	if !ok {
		return false
	}
	v, _, ok = bytes.Cut(v, []byte("\n"))
	if !ok {
		return false
	}
	caps, err := strconv.ParseUint(string(v), 16, 64)
	return err == nil && caps&(1<<capNetAdmin) == 0
}

// start is the process's start time (stat's field 22): the snapshot's
// stat, else /proc's now; "" when unread.
func (p proc) start() string {
	if p.snap == nil {
		return startTime(p.root, p.pid)
	}
	b, err := file(&p.snap.Stat)
	if err != nil {
		return ""
	}
	return procstat.Of(b).Field(22)
}

// writer places the process (watch.Proc.Writer); a stat or cgroup file
// the snapshot found longer than lib/watch reads counts as unread, as
// there.
func (p proc) writer(comm string) *findings.Writer {
	if p.snap == nil {
		return watch.Proc{Root: p.root}.Writer(p.pid, comm)
	}
	return watch.Proc{Root: p.root}.Describe(p.pid, comm, watch.FilesOf(p.snap))
}
