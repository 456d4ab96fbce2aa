package ocistate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/iptables-alerter/iptables-alerter/internal/fileio"
)

// Bounds on what the hook reads: a real state is a few KiB, a config.json
// rarely above a few hundred KiB.
const (
	maxStateBytes  = 1 << 20
	maxConfigBytes = 16 << 20
)

// Annotation keys set by the kubelet (labels) and CRI-O.
const (
	keyPodNamespace  = "io.kubernetes.pod.namespace"
	keyPodName       = "io.kubernetes.pod.name"
	keyPodUID        = "io.kubernetes.pod.uid"
	keyContainerName = "io.kubernetes.container.name"
	keySandboxID     = "io.kubernetes.cri-o.SandboxID"
	keyContainerdSB  = "io.kubernetes.cri.sandbox-id"
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
func Read(r io.Reader) (Container, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxStateBytes+1))
	if err != nil {
		return Container{}, fmt.Errorf("read state from stdin: %w", err)
	}
	if len(data) > maxStateBytes {
		return Container{}, fmt.Errorf("read state from stdin: larger than %d bytes", maxStateBytes)
	}
	var st specs.State
	if err := json.Unmarshal(data, &st); err != nil {
		return Container{}, fmt.Errorf("decode state from stdin: %w", err)
	}
	if st.ID == "" || st.Bundle == "" {
		return Container{}, fmt.Errorf("decode state from stdin: missing id or bundle")
	}
	spec, err := readConfig(st.Bundle)
	if err != nil {
		return Container{}, err
	}
	return fromSpec(st, spec), nil
}

// config is the part of config.json the hook reads. Decoding the whole
// specs.Spec would make encoding/json build codecs for its large type tree on
// every container start, for fields never looked at.
type config struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Linux       *struct {
		Namespaces []specs.LinuxNamespace `json:"namespaces,omitempty"`
	} `json:"linux,omitempty"`
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
	var spec config
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("decode bundle config %q: %w", path, err)
	}
	return &spec, nil
}

func fromSpec(st specs.State, spec *config) Container {
	// The state carries config.json's annotations; take the bundle's where
	// a runtime left the state's empty.
	ann := st.Annotations
	if len(ann) == 0 {
		ann = spec.Annotations
	}
	c := Container{
		ID:            st.ID,
		Status:        string(st.Status),
		Pid:           st.Pid,
		Bundle:        st.Bundle,
		SandboxID:     first(ann, keySandboxID, keyContainerdSB),
		PodNamespace:  ann[keyPodNamespace],
		PodName:       ann[keyPodName],
		PodUID:        ann[keyPodUID],
		ContainerName: ann[keyContainerName],
		Image:         first(ann, imageKeys...),
	}
	c.Netns, c.HostNetwork = netnsPath(spec, st.Pid)
	return c
}

// netnsPath finds the network namespace: the path CRI-O pinned, else the
// live process's own. No network entry at all means the host's network.
func netnsPath(spec *config, pid int) (string, bool) {
	if spec.Linux == nil {
		return "", true
	}
	for _, ns := range spec.Linux.Namespaces {
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
