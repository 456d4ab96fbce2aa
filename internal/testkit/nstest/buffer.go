package nstest

import (
	"bytes"
	"sync"
)

// Buffer collects what a process or a logger writes while the test reads
// it: a bytes.Buffer whose writes and reads are serialised.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
