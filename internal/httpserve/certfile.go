package httpserve

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// CertFiles serves the certificate and key in two PEM files and picks up
// new ones: OpenShift's service-ca rewrites its serving certificate
// before it expires, and the kubelet swaps the mounted Secret's files
// under the running process.
type CertFiles struct {
	certFile, keyFile string

	mu   sync.Mutex
	cert *tls.Certificate
	seen [2]fileID
}

// fileID tells a rewritten file apart: the kubelet replaces a Secret's
// files by a new directory (a new inode), an editor in place (new mtime).
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

// LoadCertFiles reads the pair once: a missing or mismatched pair at start
// is a configuration error.
func LoadCertFiles(certFile, keyFile string) (*CertFiles, error) {
	c := &CertFiles{certFile: certFile, keyFile: keyFile}
	if err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// GetCertificate is tls.Config's: it looks at both files at each
// handshake (two stats) and reloads them when either changed. A pair
// that does not load (the key written, the certificate not yet) keeps the
// previous one and is tried again at the next handshake.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.reloadLocked()
	return c.cert, nil
}

func (c *CertFiles) reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reloadLocked()
}

func (c *CertFiles) reloadLocked() error {
	var ids [2]fileID
	for i, p := range []string{c.certFile, c.keyFile} {
		id, err := statID(p)
		if err != nil {
			return err
		}
		ids[i] = id
	}
	if c.cert != nil && ids == c.seen {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("load certificate %q and key %q: %w", c.certFile, c.keyFile, err)
	}
	c.cert, c.seen = &cert, ids
	return nil
}

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, fmt.Errorf("stat %q: %w", path, err)
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id, nil
}
