package ocistate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// Bounds on what the hook reads. A real state is a few KiB, but carries
// every pod annotation: Kubernetes allows 256 KiB of them, up to six times
// that once JSON-escaped. The state streams through (only the longest
// string is held at once); config.json is read whole.
const (
	maxStateBytes  = 4 << 20
	maxConfigBytes = 16 << 20
)

// DrainWithin bounds reading the rest of a state Read stopped in, or that
// a caller exiting early did not read (Drain): the runtime has written it
// by then, or is not waiting. A variable for the tests, whose writer a
// loaded machine may starve.
var DrainWithin = time.Second

// Annotation keys set by the kubelet (labels) and CRI-O.
const (
	keyPodNamespace  = "io.kubernetes.pod.namespace"
	keyPodName       = "io.kubernetes.pod.name"
	keyPodUID        = "io.kubernetes.pod.uid"
	keyContainerName = "io.kubernetes.container.name"
	keySandboxID     = "io.kubernetes.cri-o.SandboxID"
	keyContainerdSB  = "io.kubernetes.cri.sandbox-id"
	// containerd's CRI keeps the kubelet's labels out of the OCI spec and
	// writes these instead (the same values).
	keyContainerdNamespace = "io.kubernetes.cri.sandbox-namespace"
	keyContainerdPod       = "io.kubernetes.cri.sandbox-name"
	keyContainerdUID       = "io.kubernetes.cri.sandbox-uid"
	keyContainerdName      = "io.kubernetes.cri.container-name"
)

// imageKeys in order of preference: what the user asked for reads best.
var imageKeys = []string{
	"io.kubernetes.cri-o.UserRequestedImage",
	"io.kubernetes.cri-o.ImageName",
	"io.kubernetes.cri.image-name",
	"io.kubernetes.cri-o.ImageRef",
}

// ErrNoConfig means the bundle has no readable config.json.
var ErrNoConfig = errors.New("bundle has no config.json")

// Container is what the hook needs to know about the container it runs for.
type Container struct {
	ID     string
	Status string
	Pid    int
	Bundle string

	SandboxID     string
	PodNamespace  string
	PodName       string
	PodUID        string
	ContainerName string
	Image         string

	// Netns is the path of the network namespace to inspect; empty with
	// HostNetwork set when the pod shares the node's network.
	Netns       string
	HostNetwork bool
}

// IsPod reports whether the kubelet created the container: only those carry
// the pod labels that consumers key on.
func (c Container) IsPod() bool {
	return c.PodUID != "" && c.PodName != "" && c.PodNamespace != ""
}

// Read decodes the state from r and the bundle's config.json.
//
// The state is decoded as it streams in, keeping only the fields the hook
// reads: CRI-O copies every pod annotation into it, and a pod's own 200 KiB
// annotation, inflated by JSON escaping, must not make it unreadable. Past
// maxStateBytes the rest of the state is not read; the annotations then come
// from config.json, which holds them too. Reading stops at the end of the
// state object, not at EOF, so a runtime that never closes stdin does not
// hold the hook.
func Read(r io.Reader) (Container, error) {
	st, err := readState(io.LimitReader(r, maxStateBytes))
	if err != nil {
		// Stopped before the state's end: the runtime may still be
		// writing it.
		Drain(r, DrainWithin)
	}
	switch {
	case err != nil && (st.id == "" || st.bundle == ""):
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return Container{}, fmt.Errorf("decode state from stdin (read at most %d bytes): %w", maxStateBytes, err)
		}
		return Container{}, fmt.Errorf("decode state from stdin: %w", err)
	case st.id == "" || st.bundle == "":
		return Container{}, fmt.Errorf("decode state from stdin: missing id or bundle")
	case err != nil:
		// The annotations were cut short: take config.json's.
		st.annotations = nil
	}
	spec, err := readConfig(st.bundle)
	if err != nil {
		return Container{}, err
	}
	return fromSpec(st, spec), nil
}

// state is the part of the runtime-spec State the hook reads.
type state struct {
	id, status, bundle string
	pid                int
	// annotations holds only the wanted keys; nil when the state had none
	// or they could not be read whole.
	annotations map[string]string
}

func readState(r io.Reader) (state, error) {
	var st state
	dec := json.NewDecoder(r)
	err := object(dec, func(key string) error {
		switch key {
		case "id":
			return dec.Decode(&st.id)
		case "status":
			return dec.Decode(&st.status)
		case "bundle":
			return dec.Decode(&st.bundle)
		case "pid":
			return dec.Decode(&st.pid)
		case "annotations":
			ann := map[string]string{}
			if err := annotations(dec, ann); err != nil {
				return err
			}
			st.annotations = ann
			return nil
		}
		return skip(dec)
	})
	return st, err
}

// config is the part of config.json the hook reads.
type config struct {
	annotations map[string]string
	// namespaces are linux.namespaces; linux is false when config.json has
	// no "linux" object at all.
	linux      bool
	namespaces []specs.LinuxNamespace
}

func readConfig(bundle string) (*config, error) {
	path := filepath.Join(bundle, "config.json")
	data, err := fileio.ReadFile(path, maxConfigBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read bundle config %q: %w", path, ErrNoConfig)
	}
	if err != nil {
		return nil, fmt.Errorf("read bundle config: %w", err)
	}
	// Streamed like the state, keeping only what is read: decoding the
	// whole specs.Spec would also make encoding/json build codecs for its
	// large type tree on every container start.
	spec := &config{annotations: map[string]string{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	err = object(dec, func(key string) error {
		switch key {
		case "annotations":
			return annotations(dec, spec.annotations)
		case "linux":
			spec.linux = true
			return object(dec, func(key string) error {
				if key != "namespaces" {
					return skip(dec)
				}
				return dec.Decode(&spec.namespaces)
			})
		}
		return skip(dec)
	})
	if err != nil {
		return nil, fmt.Errorf("decode bundle config %q: %w", path, err)
	}
	return spec, nil
}

func fromSpec(st state, spec *config) Container {
	// The state carries config.json's annotations; take the bundle's where
	// a runtime left the state's empty or they were too big to read.
	ann := st.annotations
	if len(ann) == 0 {
		ann = spec.annotations
	}
	c := Container{
		ID:            st.id,
		Status:        st.status,
		Pid:           st.pid,
		Bundle:        st.bundle,
		SandboxID:     first(ann, keySandboxID, keyContainerdSB),
		PodNamespace:  first(ann, keyPodNamespace, keyContainerdNamespace),
		PodName:       first(ann, keyPodName, keyContainerdPod),
		PodUID:        first(ann, keyPodUID, keyContainerdUID),
		ContainerName: first(ann, keyContainerName, keyContainerdName),
		Image:         Image(ann),
	}
	c.Netns, c.HostNetwork = netnsPath(spec, st.pid)
	return c
}

// netnsPath finds the network namespace: the path CRI-O pinned, else the
// live process's own. No network entry at all means the host's network.
func netnsPath(spec *config, pid int) (string, bool) {
	if !spec.linux {
		return "", true
	}
	for _, ns := range spec.namespaces {
		if ns.Type != specs.NetworkNamespace {
			continue
		}
		if ns.Path != "" {
			return ns.Path, false
		}
		if pid > 0 {
			return "/proc/" + strconv.Itoa(pid) + "/ns/net", false
		}
		// A private netns whose process is gone: nothing left to look at.
		return "", false
	}
	return "", true
}

func first(m map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := m[k]; v != "" {
			return v
		}
	}
	return ""
}

// Image is the image a runtime's annotations name, by imageKeys' preference
// ("" when none); the NRI agent reads the same annotations.
func Image(annotations map[string]string) string { return first(annotations, imageKeys...) }

// Drain reads r to its end, discarding it, for at most within. A hook that
// exits before it has read the whole state fails the container under crun
// (1.8 here): crun writes the state after it starts the hook, and a state
// larger than the pipe's buffer (a pod's annotations) or a write made
// after the hook's exit gives crun SIGPIPE. So every exit that did not
// read the state to its end (a bad flag, an unreadable state, the
// watchdog) drains it first; the runtime closes its end once it has
// written, so this ends at once. Only a pipe or a socket is drained: a
// terminal (a hand run) or a file holds no writer to unblock.
func Drain(r io.Reader, within time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if f, ok := r.(*os.File); ok {
			st, err := f.Stat()
			if err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
				return
			}
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
