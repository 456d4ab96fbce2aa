package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A test binary that dies before its cleanups run (the test timeout's
// panic, a SIGKILL, a crash in a cgo call) leaves its namespaces pinned
// under /run/netns for good. So each binary names its namespaces
// iptalert-OWNER-N, OWNER its own random tag, and holds a shared lock on
// ownerDir/OWNER while it lives; the first New of any later binary deletes
// the namespaces of every owner whose lock it can take exclusively, that
// is, of binaries that are gone. A random tag, not the pid: a pid is
// reused, and a binary in a child pid namespace has another one.
//
// The daemons a test starts (containerd, CRI-O, etcd, kube-apiserver, a
// kubelet) outlive a dead binary too: they carry OwnerEnv=OWNER in their
// environment, set in the binary's own once it has its tag, and the same
// sweep kills them and what they started.
const ownerDir = "/run/iptalert-nstest"

// OwnerEnv names the environment variable that tells whose a test's
// process is (see above).
const OwnerEnv = "IPTALERT_TEST_OWNER"

var owner struct {
	once sync.Once
	tag  string
	lock *os.File
	err  error
}

// ownerTag is this binary's tag, its lock taken, and the leftovers of
// dead binaries deleted, at its first call.
func ownerTag() (string, error) {
	owner.once.Do(func() {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		owner.tag = hex.EncodeToString(b)
		if err := os.MkdirAll(ownerDir, 0o700); err != nil {
			owner.err = err
			return
		}
		// Locked before it has its name, then renamed: another binary's
		// sweep never finds it unlocked (it would take this live binary
		// for a dead one), and it is there before this one's first
		// namespace.
		tmp := filepath.Join(ownerDir, ".new-"+owner.tag)
		f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err == nil {
			err = unix.Flock(int(f.Fd()), unix.LOCK_SH)
		}
		if err == nil {
			err = os.Rename(tmp, filepath.Join(ownerDir, owner.tag))
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			owner.err = err
			return
		}
		owner.lock = f // held, and so locked, until the binary exits
		// Inherited by every process this binary starts from now on.
		owner.err = os.Setenv(OwnerEnv, owner.tag)
		sweepLeftovers()
	})
	return owner.tag, owner.err
}

// MarkOwner gives the processes this test binary starts from now on its
// owner tag (OwnerEnv), so that they are killed if the binary dies before
// its cleanups run. Best effort: without root nothing is marked. A
// process given an environment of its own needs OwnerEnvVar in it.
func MarkOwner() { _, _ = ownerTag() }

// Owner is this binary's tag, "" when it has none (not root): what it
// leaves marked with it is swept once it is gone (OwnerGone).
func Owner() string {
	tag, err := ownerTag()
	if err != nil {
		return ""
	}
	return tag
}

// OwnerEnvVar is OwnerEnv=Owner(), for a process given an environment of
// its own.
func OwnerEnvVar() string { return OwnerEnv + "=" + Owner() }

// sweepLeftovers deletes the namespaces, the lock files and the port
// claims (FreePort) of owners that are gone, and writes back the sysctls
// they saved (SaveSysctls).
// Best effort: what it cannot delete is left for the next.
func sweepLeftovers() {
	sweepProcesses()
	sweepSysctls(ownerDir)
	sweepPorts(ownerDir)
	sweepRAMDirs(shmDir, ownerDir)
	ents, _ := os.ReadDir("/run/netns")
	byOwner := map[string][]string{}
	for _, e := range ents {
		if tag, ok := ownerOf(e.Name()); ok && tag != owner.tag {
			byOwner[tag] = append(byOwner[tag], e.Name())
		}
	}
	for tag, names := range byOwner {
		// No lock file counts as gone: its owner was swept once already,
		// partly (a lock file is made before the owner's first namespace).
		if !OwnerGone(tag) {
			continue
		}
		for _, n := range names {
			_ = exec.Command("ip", "netns", "del", n).Run()
		}
		_ = os.Remove(filepath.Join(ownerDir, tag))
	}
	// Lock files of owners that left no namespace behind (every binary
	// that ended well): removed once they can be locked.
	locks, _ := os.ReadDir(ownerDir)
	for _, e := range locks {
		// .new-TAG is a binary's file for the microseconds before it is
		// locked and renamed; one an hour old is a binary's that died in
		// between.
		if strings.HasPrefix(e.Name(), ".new-") {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Hour {
				_ = os.Remove(filepath.Join(ownerDir, e.Name()))
			}
			continue
		}
		if e.Name() != owner.tag && OwnerGone(e.Name()) {
			_ = os.Remove(filepath.Join(ownerDir, e.Name()))
		}
	}
}

// ownerOf is the owner tag of a name NewName made (New's namespaces,
// RAMDir's directories), false for any other name (the demo's and the
// bench's, iptalert-demo-..., are not NewName's).
func ownerOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "iptalert-")
	tag, n, ok2 := strings.Cut(rest, "-")
	return tag, ok && ok2 && isHex8(tag) && isHex8(n)
}

func isHex8(s string) bool {
	if len(s) != 8 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}
