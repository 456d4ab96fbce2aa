package watch

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
	"github.com/iptables-alerter/iptables-alerter/internal/procstat"
	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Proc describes writers from the host's /proc (the agent's --host-proc):
// the pid a commit names is in the host's pid namespace.
type Proc struct{ Root string }

// Writer describes pid, which the kernel named comm: its parent, and the
// container or unit its cgroup names (Writer.ContainerID, for the caller
// to name, and Unit). A pid that is gone, or now another process (its
// command no longer comm), gives Gone with only pid and comm.
func (p Proc) Writer(pid int, comm string) *findings.Writer {
	if pid <= 0 {
		return &findings.Writer{PID: pid, Comm: comm, Gone: true}
	}
	dir := filepath.Join(p.Root, strconv.Itoa(pid))
	// Read in this order, as Describe takes them: stat, cgroup, stat
	// again. A read that failed stops the others.
	f := &Files{}
	var err error
	f.Stat, err = readProc(filepath.Join(dir, "stat"))
	if err == nil {
		f.Cgroup, err = readProc(filepath.Join(dir, "cgroup"))
	}
	if err == nil {
		f.Again, _ = readProc(filepath.Join(dir, "stat"))
	}
	return p.Describe(pid, comm, f)
}

// Describe is Writer from its process's files read already (the exec
// watch reads them as the exec arrives, the nftables watch's reader as
// the commit's end arrives, before the command can end), or, f nil, from
// /proc now: an Options.Writer. The parent's stat is read here when f
// does not hold it.
func (p Proc) Describe(pid int, comm string, f *Files) *findings.Writer {
	if f == nil {
		return p.Writer(pid, comm)
	}
	w := &findings.Writer{PID: pid, Comm: comm, Gone: true}
	if pid <= 0 || f.Stat == nil || f.Cgroup == nil {
		return w
	}
	st, err := parseStat(f.Stat)
	if err != nil || st.comm != comm {
		return w
	}
	// The second stat after the cgroup: another start time means a
	// process took the pid meanwhile, and the cgroup read was its. Gone
	// by then, the writer was read while it lived (a pid is not reused
	// within microseconds).
	if f.Again != nil {
		if st2, err := parseStat(f.Again); err == nil && st2.start != st.start {
			return w
		}
	}
	w.Gone = false
	w.PPID = st.ppid
	if st.ppid > 0 {
		parent := f.Parent
		if parent == nil {
			parent, _ = readProc(filepath.Join(p.Root, strconv.Itoa(st.ppid), "stat"))
		}
		if pst, err := parseStat(parent); err == nil {
			w.ParentComm = pst.comm
		}
	}
	w.ContainerID, w.Unit = placeCgroup(string(f.Cgroup))
	return w
}

func readProc(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return fileio.ReadLimited(f, procstat.MaxFile)
}

type stat struct {
	comm  string
	ppid  int
	start string
}

var errStat = errors.New("malformed stat")

// parseStat reads a stat file's fields.
func parseStat(b []byte) (stat, error) {
	s, err := procstat.Parse(b)
	if err != nil {
		return stat{}, err
	}
	ppid, err := strconv.Atoi(s.Field(4))
	if err != nil || s.Field(22) == "" {
		return stat{}, errStat
	}
	return stat{comm: s.Comm, ppid: ppid, start: s.Field(22)}, nil
}

// Container cgroup names by runtime and cgroup driver, as prefixes of the
// element holding the id: the systemd driver's scope (containerd, CRI-O,
// podman, docker); with the cgroupfs driver containerd's and docker's
// element is the bare id, CRI-O's crio-<id> and podman's libpod-<id>
// without ".scope" (seen: CRI-O 1.35, /crio/crio-<id>).
// crio-conmon-<id> is CRI-O's monitor, not the container: no prefix matches
// it, and it is placed by its unit.
var idPrefixes = []string{"cri-containerd-", "crio-", "docker-", "libpod-"}

// placeCgroup reads a /proc/PID/cgroup file: the container id its path
// names, else the innermost systemd unit (service or scope). The unified
// (v2, "0::") line is preferred, then v1's systemd one, then the first.
//
// The id is the first one below the first element naming kubepods (the
// kubelet's own cgroup, under whatever --cgroup-root), or the outermost
// where none does. The runtime makes the container's cgroup, the
// container only what lies below it: a pod with a writable cgroupfs can
// nest a cgroup named after another pod's container and run there, and
// the innermost id would be that container's. Starting below kubepods
// keeps a node that is itself a container and shows above it (kind on
// cgroup v1 in the host's cgroup namespace) from naming every writer.
func placeCgroup(file string) (containerID, unit string) {
	path, rank := "", 0
	for _, line := range strings.Split(file, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		r := 1
		switch {
		case parts[0] == "0" && parts[1] == "":
			r = 3
		case parts[1] == "name=systemd":
			r = 2
		}
		if r > rank {
			path, rank = parts[2], r
		}
	}
	elems := strings.Split(path, "/")
	from := 0
	for i, e := range elems {
		if strings.Contains(e, "kubepods") {
			from = i + 1
			break
		}
	}
	for _, e := range elems[from:] {
		if id := containerOf(e); id != "" {
			return id, ""
		}
	}
	for i := len(elems) - 1; i >= 0; i-- {
		if e := elems[i]; strings.HasSuffix(e, ".service") || strings.HasSuffix(e, ".scope") {
			return "", e
		}
	}
	return "", ""
}

// containerOf is the container id one cgroup path element names, "" when
// none.
func containerOf(e string) string {
	if isID(e) {
		return e
	}
	s := strings.TrimSuffix(e, ".scope")
	for _, p := range idPrefixes {
		if id, ok := strings.CutPrefix(s, p); ok && isID(id) {
			return id
		}
	}
	return ""
}

// isID: 64 lower-case hex digits, as containerd, CRI-O, podman and docker
// make container ids.
func isID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
