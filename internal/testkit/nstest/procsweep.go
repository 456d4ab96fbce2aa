package nstest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/internal/procstat"
)

// sweepProcesses kills the processes of owners that are gone, those whose
// environment holds OwnerEnv with a tag whose lock nobody holds, and
// every process under them (a shim's containers do not carry it).
func sweepProcesses() {
	gone := map[string]bool{}
	dead := ProcessTrees(func(pid int) bool {
		tag := ownerOfProcess(pid)
		if tag == "" || tag == owner.tag {
			return false
		}
		d, ok := gone[tag]
		if !ok {
			d = OwnerGone(tag)
			gone[tag] = d
		}
		return d
	})
	for _, pid := range dead {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// ProcessTrees lists the processes root picks and every process under
// them, each picked one before its descendants, all gathered in one read
// of /proc before the caller kills any: a killed parent's children go to
// init, out of reach. Zombies are left out (dead already, their parent's
// or init's to reap), and so is this process.
func ProcessTrees(root func(pid int) bool) []int {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	var roots []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := procstat.Of(stat)
		ppid, err := strconv.Atoi(s.Field(4))
		if err != nil || s.Field(3) == "Z" {
			continue
		}
		children[ppid] = append(children[ppid], pid)
		if root(pid) {
			roots = append(roots, pid)
		}
	}
	seen := map[int]bool{}
	var out []int
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, pid := range roots {
		walk(pid)
	}
	return out
}

// ownerOfProcess is the tag in pid's environment, "" for none.
func ownerOfProcess(pid int) string {
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(OwnerEnv+"=")); ok {
			return string(v)
		}
	}
	return ""
}

// OwnerGone tells whether the test binary that tag names is gone: nobody
// holds its lock, or its lock file is gone (a binary takes it before it
// marks anything of its own, and it is removed only once nobody holds it).
func OwnerGone(tag string) bool { return ownerGoneIn(ownerDir, tag) }

// ownerGoneIn is OwnerGone with the lock files in dir.
func ownerGoneIn(dir, tag string) bool {
	if !isHex8(tag) {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, tag), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}
