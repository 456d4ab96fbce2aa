package ocistate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const labels = `"io.kubernetes.pod.namespace":"ns","io.kubernetes.pod.name":"p","io.kubernetes.pod.uid":"u",` +
	`"io.kubernetes.container.name":"c","io.kubernetes.cri-o.SandboxID":"sb","io.kubernetes.cri-o.ImageRef":"sha256:1",` +
	`"io.kubernetes.cri-o.UserRequestedImage":"quay.io/x:1"`

func TestRead(t *testing.T) {
	tests := []struct {
		name   string
		config string // config.json; "-" for none
		state  string // %B is replaced by the bundle path
		want   Container
		err    string
	}{
		{
			name:   "pinned netns",
			config: `{"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/x"}]}}`,
			state:  `{"id":"c1","status":"running","pid":42,"bundle":"%B","annotations":{` + labels + `}}`,
			want: Container{ID: "c1", Status: "running", Pid: 42, SandboxID: "sb", PodNamespace: "ns", PodName: "p", PodUID: "u",
				ContainerName: "c", Image: "quay.io/x:1", Netns: "/run/netns/x"},
		},
		{
			name:   "private netns of a live pid",
			config: `{"linux":{"namespaces":[{"type":"network"}]}}`,
			state:  `{"id":"c1","pid":42,"bundle":"%B"}`,
			want:   Container{ID: "c1", Pid: 42, Netns: "/proc/42/ns/net"},
		},
		{
			name:   "host network",
			config: `{"linux":{"namespaces":[{"type":"pid"}]}}`,
			state:  `{"id":"c1","bundle":"%B"}`,
			want:   Container{ID: "c1", HostNetwork: true},
		},
		{
			name:   "annotations from config.json when the state has none",
			config: `{"annotations":{` + labels + `},"linux":{"namespaces":[{"type":"network","path":"/n"}]}}`,
			state:  `{"id":"c1","bundle":"%B"}`,
			want: Container{ID: "c1", SandboxID: "sb", PodNamespace: "ns", PodName: "p", PodUID: "u",
				ContainerName: "c", Image: "quay.io/x:1", Netns: "/n"},
		},
		{
			// containerd's CRI writes its own annotations, not the kubelet's
			// labels (seen on containerd 2.2.9 in tests/runtime/nri).
			name: "containerd annotations",
			config: `{"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-id":"sb",` +
				`"io.kubernetes.cri.sandbox-namespace":"ns","io.kubernetes.cri.sandbox-name":"p","io.kubernetes.cri.sandbox-uid":"u",` +
				`"io.kubernetes.cri.container-name":"c","io.kubernetes.cri.image-name":"localhost/x:1"},` +
				`"linux":{"namespaces":[{"type":"network","path":"/var/run/netns/cni-1"}]}}`,
			state: `{"id":"c1","status":"running","pid":42,"bundle":"%B"}`,
			want: Container{ID: "c1", Status: "running", Pid: 42, SandboxID: "sb", PodNamespace: "ns", PodName: "p", PodUID: "u",
				ContainerName: "c", Image: "localhost/x:1", Netns: "/var/run/netns/cni-1"},
		},
		{name: "malformed state", config: `{}`, state: `{"id":`, err: "decode state from stdin"},
		{name: "state without bundle", config: `{}`, state: `{"id":"c1"}`, err: "missing id or bundle"},
		{name: "no config.json", config: "-", state: `{"id":"c1","bundle":"%B"}`, err: "bundle has no config.json"},
		{name: "malformed config.json", config: `{"linux":`, state: `{"id":"c1","bundle":"%B"}`, err: "decode bundle config"},
		{name: "huge state", config: `{}`, state: `{"id":"` + strings.Repeat("x", maxStateBytes) + `","bundle":"%B"}`, err: "read at most"},
		{
			// CRI-O copies pod annotations into the state; Go sorts map
			// keys, so a pod's own "a..." annotation comes before the
			// kubelet's "io.kubernetes..." labels. 300 KiB of '<' is 1.8 MiB
			// once escaped (\u003c).
			name:   "a big pod annotation is streamed past",
			config: `{"linux":{"namespaces":[{"type":"network","path":"/run/netns/x"}]}}`,
			state:  `{"id":"c1","status":"running","pid":42,"bundle":"%B","annotations":{"a.example/blob":"` + strings.Repeat(`\u003c`, 300<<10) + `",` + labels + `}}`,
			want: Container{ID: "c1", Status: "running", Pid: 42, SandboxID: "sb", PodNamespace: "ns", PodName: "p", PodUID: "u",
				ContainerName: "c", Image: "quay.io/x:1", Netns: "/run/netns/x"},
		},
		{
			name:   "annotations past the state bound come from config.json",
			config: `{"annotations":{` + labels + `},"linux":{"namespaces":[{"type":"network","path":"/n"}]}}`,
			state:  `{"id":"c1","bundle":"%B","annotations":{"a.example/blob":"` + strings.Repeat(`\u003c`, maxStateBytes/6+1) + `",` + labels + `}}`,
			want: Container{ID: "c1", SandboxID: "sb", PodNamespace: "ns", PodName: "p", PodUID: "u",
				ContainerName: "c", Image: "quay.io/x:1", Netns: "/n"},
		},
		{
			name:   "unknown fields of any shape are skipped",
			config: `{"process":{"args":["a",{"b":[1,2]}]},"linux":{"uidMappings":[{}],"namespaces":[{"type":"network","path":"/n"}]}}`,
			state:  `{"ociVersion":"1.2.0","extra":[{"x":[null,true,1.5]}],"id":"c1","bundle":"%B"}`,
			want:   Container{ID: "c1", Netns: "/n"},
		},
		{name: "state not an object", config: `{}`, state: `["id"]`, err: "decode state from stdin"},
		{name: "malformed skipped value", config: `{"process":{"args":["a",]},"linux":{"namespaces":[]}}`, state: `{"id":"c1","bundle":"%B"}`, err: "decode bundle config"},
		{name: "malformed skipped state field", config: `{}`, state: `{"extra":{"x":tru},"id":"c1","bundle":"%B"}`, err: "decode state from stdin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.config != "-" {
				os.WriteFile(filepath.Join(dir, "config.json"), []byte(tc.config), 0o644)
			}
			c, err := Read(strings.NewReader(strings.ReplaceAll(tc.state, "%B", dir)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Bundle = dir
			if d := cmp.Diff(tc.want, c); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestReadConfigSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "real.json"), []byte(`{}`), 0o644)
	os.Symlink(filepath.Join(dir, "real.json"), filepath.Join(dir, "config.json"))
	_, err := Read(strings.NewReader(`{"id":"c","bundle":"` + dir + `"}`))
	if err == nil || errors.Is(err, ErrNoConfig) {
		t.Fatalf("symlinked config.json: err = %v", err)
	}
}

// TestReadStopsAtObjectEnd: a runtime that never closes stdin does not hold
// the hook; the state ends with its object.
func TestReadStopsAtObjectEnd(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{}`), 0o644)
	r, w := io.Pipe()
	defer w.Close()
	go w.Write([]byte(`{"id":"c1","bundle":"` + dir + `"}` + "\n"))
	done := make(chan error, 1)
	go func() { _, err := Read(r); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read waits for EOF after the state object")
	}
}

// BenchmarkRead reads a state and a config.json shaped as CRI-O writes them
// for a pod with the RuntimeDefault seccomp profile (OpenShift's
// restricted SCCs): indented with tabs, the profile naming about 400
// syscalls, some 40 KB that the hook skips at every container start.
func BenchmarkRead(b *testing.B) {
	dir := b.TempDir()
	var names []string
	for i := range 400 {
		names = append(names, fmt.Sprintf(`"syscall_%d"`, i))
	}
	var rules []string
	for i := range 60 {
		rules = append(rules, fmt.Sprintf(`{"names":["syscall_%d"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":2080505856,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}],"includes":{"caps":["CAP_SYS_ADMIN"]}}`, i))
	}
	config := `{"ociVersion":"1.2.0","process":{"args":["sh","-c","sleep 1"],"env":["PATH=/usr/bin:/bin"]},` +
		`"annotations":{` + labels + `},"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/x"}],` +
		`"seccomp":{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":[` + strings.Join(names, ",") + `],"action":"SCMP_ACT_ALLOW"},` + strings.Join(rules, ",") + `]}}}`
	var indented bytes.Buffer
	if err := json.Indent(&indented, []byte(config), "", "\t"); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), indented.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	state := `{"ociVersion":"1.2.0","id":"c1","status":"running","pid":42,"bundle":"` + dir + `","annotations":{` + labels + `}}`
	b.SetBytes(int64(indented.Len() + len(state)))
	for b.Loop() {
		if c, err := Read(strings.NewReader(state)); err != nil || c.Netns != "/run/netns/x" {
			b.Fatal(c, err)
		}
	}
}

// pipeState writes data into a pipe as a runtime writes the state, after
// delay, then closes its end; written gives the write's error once the
// test has closed the reading end, as a hook's exit does: EPIPE where the
// reader left before the writer was done (crun then dies of SIGPIPE).
func pipeState(t *testing.T, data []byte, delay time.Duration) (r *os.File, written func() error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		time.Sleep(delay)
		_, err := w.Write(data)
		w.Close()
		done <- err
	}()
	return r, func() error {
		r.Close()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the writer is still blocked")
			return nil
		}
	}
}

// TestDrain: what was left of the state is read to its end, so the
// runtime's write completes; a writer that never closes holds it only
// for the bound; a file is not read.
func TestDrain(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 256<<10)
	t.Run("pipe", func(t *testing.T) {
		r, written := pipeState(t, big, 50*time.Millisecond)
		Drain(r, 5*time.Second)
		if err := written(); err != nil {
			t.Fatalf("the runtime's write of the state: %v", err)
		}
	})
	t.Run("writer never closes", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		start := time.Now()
		Drain(r, 100*time.Millisecond)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Drain took %v with a bound of 100ms", took)
		}
	})
	t.Run("file", func(t *testing.T) {
		f, err := os.CreateTemp(t.TempDir(), "state")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(big); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		Drain(f, time.Second)
		if off, _ := f.Seek(0, io.SeekCurrent); off != 0 {
			t.Fatalf("a file was read to %d", off)
		}
	})
}

// TestReadDrainsOnError: a state Read cannot decode is read to its end
// before Read returns, so the runtime's write of it completes.
func TestReadDrainsOnError(t *testing.T) {
	// A loaded machine may starve the writer: the bound is not tested here.
	within := DrainWithin
	DrainWithin = time.Minute
	t.Cleanup(func() { DrainWithin = within })
	state := append([]byte(`{"id":"c1","bundle":`), bytes.Repeat([]byte("!"), 256<<10)...)
	r, written := pipeState(t, state, 50*time.Millisecond)
	if _, err := Read(r); err == nil {
		t.Fatal("Read took a malformed state")
	}
	if err := written(); err != nil {
		t.Fatalf("the runtime's write of the state: %v", err)
	}
}
