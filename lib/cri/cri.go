// Package cri is the two calls of the container runtime's CRI the agent's
// fallback makes (list the ready pod sandboxes, read one's network
// namespace), as gRPC requests over the runtime's unix socket.
//
// Why not grpc-go and k8s.io/cri-api: the agent-only binary that every
// node runs linked them only for these two calls, and with them about 5 MB
// of the 17.7 MB file (grpc's golang.org/x/net/trace brings html/template,
// whose reflection keeps every exported method of the binary), and 4 MB of
// its resident pages (docs/performance.md). A unary gRPC call is one
// HTTP/2 POST (Go's net/http speaks HTTP/2 without TLS) of a
// length-prefixed protobuf message, the status in the trailers; the few
// fields read are decoded with protowire.
package cri

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrEndpoint is an endpoint that is no unix socket.
var ErrEndpoint = errors.New("CRI endpoint")

// MaxResponse bounds one answer (gRPC's default receive bound): a verbose
// status carries the sandbox's whole runtime spec, with the pod's
// annotations.
const MaxResponse = 4 << 20

// Client calls the runtime service of one CRI socket.
type Client struct {
	hc *http.Client
	tr *http.Transport
}

// Sandbox is a ready pod sandbox as the runtime lists it.
type Sandbox struct {
	ID                   string
	Name, Namespace, UID string
	Labels               map[string]string
}

// New is a client of endpoint: a socket path, or unix://PATH (unix:PATH),
// as the kubelet's --container-runtime-endpoint takes it. Nothing is
// dialled until a call.
func New(endpoint string) (*Client, error) {
	path := endpoint
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		path = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "unix:"):
		path = strings.TrimPrefix(endpoint, "unix:")
	case strings.Contains(endpoint, "://"):
		return nil, fmt.Errorf("%w %q: only unix sockets", ErrEndpoint, endpoint)
	}
	if path == "" {
		return nil, fmt.Errorf("%w %q: no socket path", ErrEndpoint, endpoint)
	}
	var p http.Protocols
	// HTTP/2 with prior knowledge, as gRPC servers expect on a socket.
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: &p,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		// No proxy, whatever the environment says: the socket is local.
		Proxy: nil,
	}
	return &Client{hc: &http.Client{Transport: tr}, tr: tr}, nil
}

// Close closes the idle connection.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// ListReady lists the ready pod sandboxes.
func (c *Client) ListReady(ctx context.Context) ([]Sandbox, error) {
	// ListPodSandboxRequest{filter: {state: {state: SANDBOX_READY}}}:
	// SANDBOX_READY is 0, so the innermost message is empty.
	state := protowire.AppendTag(nil, 2, protowire.BytesType)
	state = protowire.AppendBytes(state, nil)
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendBytes(req, state)
	resp, err := c.call(ctx, "ListPodSandbox", req)
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	var list []Sandbox
	err = fields(resp, func(n protowire.Number, b []byte, _ uint64) error {
		if n != 1 {
			return nil
		}
		s, err := sandbox(b)
		list = append(list, s)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	return list, nil
}

// sandbox decodes a PodSandbox.
func sandbox(b []byte) (Sandbox, error) {
	var s Sandbox
	err := fields(b, func(n protowire.Number, b []byte, _ uint64) error {
		switch n {
		case 1:
			s.ID = string(b)
		case 2:
			return fields(b, func(n protowire.Number, b []byte, _ uint64) error {
				switch n {
				case 1:
					s.Name = string(b)
				case 2:
					s.UID = string(b)
				case 3:
					s.Namespace = string(b)
				}
				return nil
			})
		case 5:
			if s.Labels == nil {
				s.Labels = map[string]string{}
			}
			return entry(b, s.Labels)
		}
		return nil
	})
	return s, err
}

// Netns is the network namespace path of sandbox id, from its verbose
// status: containerd and CRI-O both put the sandbox's runtime spec there.
// Empty for a sandbox in the node's network (host network) or without one.
func (c *Client) Netns(ctx context.Context, id string) (string, error) {
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendString(req, id)
	req = protowire.AppendTag(req, 2, protowire.VarintType)
	req = protowire.AppendVarint(req, 1)
	resp, err := c.call(ctx, "PodSandboxStatus", req)
	if err != nil {
		return "", fmt.Errorf("pod sandbox status %q: %w", id, err)
	}
	var node bool
	info := map[string]string{}
	err = fields(resp, func(n protowire.Number, b []byte, _ uint64) error {
		switch n {
		case 1:
			// status.linux.namespaces.options.network == NODE (2)
			return path(b, []protowire.Number{6, 1, 2}, func(b []byte) error {
				return fields(b, func(n protowire.Number, _ []byte, v uint64) error {
					if n == 1 && v == nodeMode {
						node = true
					}
					return nil
				})
			})
		case 2:
			return entry(b, info)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("pod sandbox status %q: %w", id, err)
	}
	if node {
		return "", nil
	}
	var spec struct {
		RuntimeSpec struct {
			Linux struct {
				Namespaces []struct{ Type, Path string }
			}
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(info["info"]), &spec); err != nil {
		return "", fmt.Errorf("pod sandbox status %q: decode info: %w", id, err)
	}
	for _, ns := range spec.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			return ns.Path, nil
		}
	}
	return "", nil
}

// nodeMode is NamespaceMode NODE: the sandbox shares the node's namespace.
const nodeMode = 2

// path calls f with the message found by following the message fields
// nums from b (each the last of its number, as protobuf merges them).
func path(b []byte, nums []protowire.Number, f func([]byte) error) error {
	if len(nums) == 0 {
		return f(b)
	}
	var inner []byte
	found := false
	err := fields(b, func(n protowire.Number, v []byte, _ uint64) error {
		if n == nums[0] {
			inner, found = v, true
		}
		return nil
	})
	if err != nil || !found {
		return err
	}
	return path(inner, nums[1:], f)
}

// entry decodes a map<string, string> entry into m.
func entry(b []byte, m map[string]string) error {
	var k, v string
	err := fields(b, func(n protowire.Number, b []byte, _ uint64) error {
		switch n {
		case 1:
			k = string(b)
		case 2:
			v = string(b)
		}
		return nil
	})
	m[k] = v
	return err
}

// fields calls f with each field of message b: a length-delimited one's
// bytes, a varint's value; other wire types are skipped.
func fields(b []byte, f func(n protowire.Number, b []byte, v uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("malformed message: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var err error
		switch typ {
		case protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			if n >= 0 {
				err = f(num, v, 0)
			}
		case protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			if n >= 0 {
				err = f(num, nil, v)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("malformed message: %w", protowire.ParseError(n))
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// call makes one unary call of the runtime service: the request message
// req, the answer's message (at most MaxResponse bytes).
// ErrNotFound is the runtime's answer for what it does not have (gRPC
// NOT_FOUND): a sandbox gone since the list.
var ErrNotFound = errors.New("not found")

// grpcNotFound is gRPC's NOT_FOUND status code.
const grpcNotFound = "5"

func (c *Client) call(ctx context.Context, method string, req []byte) ([]byte, error) {
	body := make([]byte, 5, 5+len(req))
	binary.BigEndian.PutUint32(body[1:], uint32(len(req)))
	body = append(body, req...)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost/runtime.v1.RuntimeService/"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/grpc")
	hr.Header.Set("Te", "trailers")
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP status %s", resp.Status)
	}
	var msg []byte
	var prefix [5]byte
	switch _, err := io.ReadFull(resp.Body, prefix[:]); {
	case err == io.EOF:
		// No message: a status alone (an error, as a rule).
	case err != nil:
		return nil, err
	case prefix[0] != 0:
		return nil, errors.New("compressed answer (none was offered)")
	default:
		n := binary.BigEndian.Uint32(prefix[1:])
		if n > MaxResponse {
			return nil, fmt.Errorf("answer of %d bytes, over %d", n, MaxResponse)
		}
		msg = make([]byte, n)
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			return nil, err
		}
		// The trailers come after the body's end; one message only.
		if n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 1)); n > 0 {
			return nil, errors.New("more than one answer to a unary call")
		}
	}
	// Trailers, or the headers of a status-only answer.
	status, text := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" {
		status, text = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if status != "0" {
		if t, err := url.PathUnescape(text); err == nil {
			text = t
		}
		if status == grpcNotFound {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, text)
		}
		return nil, fmt.Errorf("gRPC status %q: %s", status, text)
	}
	if msg == nil {
		return nil, errors.New("no answer")
	}
	return msg, nil
}
