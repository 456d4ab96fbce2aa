package follow

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iptables-alerter/iptables-alerter/lib/findings"
)

// Handler handles one complete line (without its newline). The slice is the
// handler's to keep; ctx is the one given to Run or Once. A non-nil error
// means "not handled": the same line comes again later.
type Handler func(ctx context.Context, line []byte) error

// Skip describes a line the follower did not hand to the handler, or,
// with Size -1, a gap: the file it was in went before it was read to its
// end.
type Skip struct {
	File   string
	Offset int64
	Size   int64
	Reason string
}

// Follower follows one findings file. Set the exported fields before the
// first Run or Once; a Follower is used by one goroutine at a time.
type Follower struct {
	// Poll is how long Run waits when there is nothing new.
	Poll time.Duration
	// MaxLine bounds a line (without newline); longer lines are skipped.
	MaxLine int
	// Batch is how many lines may be handled between checkpoint saves.
	Batch int
	// MinBackoff and MaxBackoff bound the wait before Run retries after an
	// error (the wait doubles on each consecutive error).
	MinBackoff, MaxBackoff time.Duration
	// Skipped, if set, is told about each line that is not handed over:
	// longer than MaxLine, or the torn tail of a rotated file.
	Skipped func(Skip)
	// Retry, if set, is told about each error Run recovers from by waiting.
	Retry func(err error, wait time.Duration)
	// Reset, if set, is told when the saved checkpoint was damaged and the
	// follower starts over from the oldest line.
	Reset func(err error)
	// Flush, if set, is called before each checkpoint save: what the
	// handler kept back to do in bulk (one write for many lines) must be
	// done before those lines count as handled. Its error keeps the saved
	// checkpoint where it was and is retried like a handler's; the lines
	// are not handed again (unless the process restarts), Flush is.
	Flush func(ctx context.Context) error

	path      string
	store     Store
	loaded    bool
	cp, saved Checkpoint
	pending   int
	alive     atomic.Int64
	// caughtUp is when the files were last opened for a look that then
	// handled every complete line in them (CaughtUp), Unix nanoseconds.
	caughtUp atomic.Int64
}

// Defaults for the zero values of the exported fields.
const (
	DefaultPoll       = 250 * time.Millisecond
	DefaultMaxLine    = 1 << 20
	DefaultBatch      = 256
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// New returns a follower of path that keeps its checkpoint in store.
func New(path string, store Store) *Follower {
	return &Follower{
		Poll:       DefaultPoll,
		MaxLine:    DefaultMaxLine,
		Batch:      DefaultBatch,
		MinBackoff: DefaultMinBackoff,
		MaxBackoff: DefaultMaxBackoff,
		path:       path,
		store:      store,
	}
}

// Checkpoint is the position reached so far (handled, maybe not yet saved).
func (f *Follower) Checkpoint() Checkpoint { return f.cp }

// Alive is when Run last went round its loop or handled a line; a
// liveness probe compares it with the clock. Zero before Run starts.
func (f *Follower) Alive() time.Time {
	n := f.alive.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// CaughtUp is the latest moment every line written before it was handled
// (zero before the first such look): a reader of the handlers' results
// can then tell they rest on everything a writer wrote up to a moment.
func (f *Follower) CaughtUp() time.Time {
	n := f.caughtUp.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Touch marks the follower alive now (Alive): Run does at each round and
// each line handled, and a consumer's long work does (the Reports of a
// batch written one by one at the API's pace): the liveness probe must not
// restart a consumer that is getting on.
func (f *Follower) Touch() { f.alive.Store(time.Now().UnixNano()) }

// Run follows the file until ctx is done, then saves the checkpoint and
// returns nil. Handler, read and save errors are retried with backoff; only
// a checkpoint that cannot be loaded (other than damaged, see Reset), or a
// final save that fails, is returned.
func (f *Follower) Run(ctx context.Context, h Handler) error {
	if err := f.load(); err != nil {
		return err
	}
	var wait time.Duration
	for {
		f.Touch()
		progressed, err := f.step(ctx, h)
		if perr := f.persist(ctx); err == nil {
			err = perr
		}
		if ctx.Err() != nil {
			// The last save's Flush gets a little time of its own.
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastFlush)
			defer cancel()
			return f.persist(last)
		}
		if err != nil {
			wait = f.backoff(wait)
			if f.Retry != nil {
				f.Retry(err, wait)
			}
			sleep(ctx, wait)
			continue
		}
		wait = 0
		if !progressed {
			sleep(ctx, f.Poll)
		}
	}
}

// Once handles every complete line there is now, in both files, saves the
// checkpoint and returns. A handler error stops it (the checkpoint is saved
// up to the line before) and is returned.
func (f *Follower) Once(ctx context.Context, h Handler) error {
	if err := f.load(); err != nil {
		return err
	}
	for {
		progressed, err := f.step(ctx, h)
		perr := f.persist(ctx)
		if err != nil {
			return err
		}
		if perr != nil {
			return perr
		}
		if !progressed {
			return nil
		}
	}
}

func (f *Follower) backoff(prev time.Duration) time.Duration {
	if prev == 0 {
		return f.MinBackoff
	}
	return min(prev*2, f.MaxBackoff)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (f *Follower) load() error {
	if f.loaded {
		return nil
	}
	cp, err := f.store.Load()
	if errors.Is(err, ErrDamaged) {
		if f.Reset != nil {
			f.Reset(err)
		}
		cp, err = Checkpoint{}, nil
	}
	if err != nil {
		return err
	}
	f.cp, f.saved, f.loaded = cp, cp, true
	return nil
}

// lastFlush bounds the Flush of the save at the end of Run.
const lastFlush = 10 * time.Second

// persist saves the checkpoint if it moved, after Flush.
func (f *Follower) persist(ctx context.Context) error {
	if f.cp == f.saved {
		return nil
	}
	if f.Flush != nil {
		if err := f.Flush(ctx); err != nil {
			return err
		}
	}
	if err := f.store.Save(f.cp); err != nil {
		return err
	}
	f.saved, f.pending = f.cp, 0
	return nil
}

// file is one opened candidate; identity comes from fstat of the open
// descriptor, so a rename between stat and read cannot mix two files.
type file struct {
	*os.File
	name       string
	dev, inode uint64
	birth      int64 // statx's birth time in ns, 0 when not given
	size       int64
}

// errNotRegular: a directory, FIFO or device where a findings file
// should be (a link is not followed: ELOOP).
var errNotRegular = errors.New("not a regular file")

func open(name string) (*file, error) {
	fd, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("open findings %q: a link: %w", name, errNotRegular)
	}
	if err != nil {
		return nil, fmt.Errorf("open findings %q: %w", name, err)
	}
	fi, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("stat findings %q: %w", name, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		fd.Close()
		return nil, fmt.Errorf("open findings %q: %w", name, errNotRegular)
	}
	return &file{File: fd, name: name, dev: uint64(st.Dev), inode: st.Ino, birth: birthOf(fd), size: fi.Size()}, nil
}

// birthOf is fd's birth time in ns, 0 where the kernel or filesystem
// gives none (older kernels, some filesystems): identity then falls back
// on the device and inode numbers.
func birthOf(fd *os.File) int64 {
	rc, err := fd.SyscallConn()
	if err != nil {
		return 0
	}
	var stx unix.Statx_t
	var serr error
	// Control, not Fd: Fd would put the descriptor in blocking mode.
	if err := rc.Control(func(fd uintptr) {
		serr = unix.Statx(int(fd), "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_BTIME, &stx)
	}); err != nil || serr != nil || stx.Mask&unix.STATX_BTIME == 0 {
		return 0
	}
	return stx.Btime.Sec*1e9 + int64(stx.Btime.Nsec)
}

func (x *file) start(prev FileID) Checkpoint {
	return Checkpoint{Dev: x.dev, Inode: x.inode, Birth: x.birth, Rotated: prev}
}

// is reports whether x is the checkpoint's file as far as its inode tells
// (sameFile); its first line is for the caller to compare.
func (x *file) is(c Checkpoint) bool {
	return sameFile(x.dev, x.inode, x.birth, c.Dev, c.Inode, c.Birth)
}

func (x *file) firstLine() (string, error) {
	sum, _, err := firstLineHash(x)
	if err != nil {
		return "", fmt.Errorf("read findings %q: %w", x.name, err)
	}
	return sum, nil
}

func (x *file) id() (FileID, error) {
	sum, err := x.firstLine()
	return FileID{Dev: x.dev, Inode: x.inode, Birth: x.birth, FirstLine: sum}, err
}

// holds reports whether x holds the checkpoint's lines: a first line
// with the checkpoint's hash and at least its offset of bytes.
func (x *file) holds(c Checkpoint) (bool, error) {
	sum, err := x.firstLine()
	return err == nil && sum != "" && sum == c.FirstLine && x.size >= c.Offset, err
}

// openAll opens every generation, oldest first, one entry per file. The
// hook may rotate meanwhile, and a listing taken in the middle of a
// rotation lacks a name (PATH.1 between its two renames): a set opened from
// it skips a whole generation, and the follower, not finding its file,
// would go on after it and lose the rest of its lines. So the set is taken
// again until the names, listed again after the opens, each still name
// the file opened under them: the order is the order of one moment.
// A rotated name found missing at its open is a rotation under way, and the
// set is taken again: its absence cannot be checked afterwards, since the
// next rotation empties the same name again after the older names were
// checked (CI saw [960 962 963] that way). Only the current file may be
// missing: the hook creates it after renaming it away, and before its
// first finding there is none.
func openAll(path string) ([]*file, error) {
	for try := 0; try < maxOpenTries; try++ {
		names, err := findings.Generations(path)
		if err != nil {
			return nil, err
		}
		var files []*file
		byName := map[string][2]uint64{}
		seen := map[[2]uint64]bool{}
		// aside are rotated names that hold no file (a directory or a
		// link planted there): no writer's lines are in them, and
		// failing on them would stop every consumer for good while the
		// writer goes on (it appends when it cannot rotate).
		aside := map[string]bool{}
		moving := false
		for _, n := range names {
			x, err := open(n)
			if errors.Is(err, errNotRegular) && n != path {
				aside[n] = true
				continue
			}
			if err != nil {
				closeAll(files)
				return nil, err
			}
			if x == nil {
				if n != path {
					moving = true
					break
				}
				continue
			}
			k := [2]uint64{x.dev, x.inode}
			byName[n] = k
			if seen[k] {
				x.Close()
				continue
			}
			seen[k] = true
			files = append(files, x)
		}
		if moving {
			closeAll(files)
			continue
		}
		ok, err := unmoved(path, names, byName, aside)
		if ok || err != nil {
			if err != nil {
				closeAll(files)
				return nil, err
			}
			return files, nil
		}
		closeAll(files)
	}
	return nil, fmt.Errorf("open findings %q: rotated again at each of %d tries", path, maxOpenTries)
}

// maxOpenTries bounds openAll under rotations back to back; Run retries
// after its backoff.
const maxOpenTries = 50

// unmoved reports whether the generations are still the names listed, each
// naming the file opened under it (the current file may be missing again:
// openAll took the set only when every rotated name was there).
func unmoved(path string, names []string, byName map[string][2]uint64, aside map[string]bool) (bool, error) {
	again, err := findings.Generations(path)
	if err != nil || !slices.Equal(again, names) {
		return false, err
	}
	for _, n := range names {
		var st syscall.Stat_t
		err := syscall.Lstat(n, &st)
		k, opened := byName[n]
		switch {
		case errors.Is(err, syscall.ENOENT):
			if opened {
				return false, nil
			}
		case err != nil:
			return false, nil
		case aside[n]:
			if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
				return false, nil
			}
		case !opened || k != [2]uint64{uint64(st.Dev), st.Ino}:
			return false, nil
		}
	}
	return true, nil
}

func closeAll(files []*file) {
	for _, x := range files {
		x.Close()
	}
}

// choose picks the file to read now (an index into files, oldest first);
// it resets f.cp when the file it pointed into is gone.
func (f *Follower) choose(files []*file) (int, error) {
	if len(files) == 0 {
		return -1, nil
	}
	if f.cp.IsZero() {
		// Nothing read yet: start with the oldest lines there are.
		f.cp = files[0].start(FileID{})
		return 0, nil
	}
	// The file the checkpoint names, by inode (and birth time) and, past
	// its first line, by that line.
	for i, x := range files {
		if !x.is(f.cp) {
			continue
		}
		if f.cp.Offset == 0 && f.cp.Birth != 0 && x.birth != 0 {
			// Born when the checkpoint's file was: that file. The
			// generations just before it born after it, back to the
			// one the follower came from (Rotated), are copies of it
			// (logrotate's copytruncate, while the follower was
			// stopped): the first holds the lines it had, none read,
			// so reading starts there, and goes on down to it. One
			// born in the same tick of the kernel's coarse clock says
			// nothing (rotations back to back reuse an inode number
			// within a tick): then as without birth times (startsAt).
			j, same := i, false
			for j > 0 && files[j-1].birth >= x.birth {
				id, err := files[j-1].id()
				if err != nil {
					return -1, err
				}
				if id.same(f.cp.Rotated) {
					break
				}
				if same = files[j-1].birth == x.birth; same {
					break
				}
				j--
			}
			if !same {
				if j < i {
					f.cp = files[j].start(f.cp.Rotated)
				}
				return j, nil
			}
		}
		if f.cp.Offset == 0 {
			ok, err := f.startsAt(files, i)
			if err != nil {
				return -1, err
			}
			if ok {
				return i, nil
			}
			continue
		}
		ok, err := x.holds(f.cp)
		if err != nil {
			return -1, err
		}
		if ok {
			return i, nil
		}
	}
	// A copy of it under another inode: logrotate's copytruncate copies
	// the file to PATH.1 and truncates it in place. The copy holds the rest
	// of the lines; the truncated original comes after it. A copy shorter
	// than the checkpoint was taken before lines the follower then read
	// from the original, ahead of the truncate: it holds nothing unread,
	// and reading goes on at the start of the file after it.
	if f.cp.Offset > 0 {
		for i, x := range files {
			ok, err := x.holds(f.cp)
			if err != nil {
				return -1, err
			}
			if ok {
				f.cp.Dev, f.cp.Inode, f.cp.Birth = x.dev, x.inode, x.birth
				return i, nil
			}
			if x.is(f.cp) || i == len(files)-1 {
				continue
			}
			if id, err := x.id(); err == nil && id.FirstLine != "" && id.FirstLine == f.cp.FirstLine {
				f.cp = files[i+1].start(id)
				return i + 1, nil
			}
		}
	}
	// Gone: truncated in place, removed, or rotated past the last
	// generation. Go on after the file that came before it, if that is
	// still there; otherwise everything left is newer. Lines it held past
	// the checkpoint, if any, were never handed over: said, as a skip, so
	// the consumer counts and logs the gap instead of going on silently.
	// Said once the way on is known: a read that fails is retried, and
	// the gap would be counted again.
	prev := f.cp.Rotated
	next, cp := 0, files[0].start(FileID{})
	for i, x := range files[:len(files)-1] {
		if !sameFile(x.dev, x.inode, x.birth, prev.Dev, prev.Inode, prev.Birth) {
			continue
		}
		id, err := x.id()
		if err != nil {
			return -1, err
		}
		if id.same(prev) {
			next, cp = i+1, files[i+1].start(id)
			break
		}
	}
	if f.Skipped != nil {
		f.Skipped(Skip{File: f.path, Offset: f.cp.Offset, Size: -1,
			Reason: "the file the checkpoint was in is gone (rotated past the last generation, removed or truncated) before it was read to its end: its lines past the offset, if any, were lost"})
	}
	f.cp = cp
	return next, nil
}

// startsAt reports whether files[i], which has the inode number of the
// checkpoint's file, is that file, the checkpoint being at its start. With
// no line read there is no first line to compare, and the inode number
// alone is not enough: the number of a file rotated away is given to the
// next file made (CI saw the current file, made at the rotation that
// removed PATH.1, take PATH.1's number, and a follower that trusted it
// went on there, skipping the newer PATH.1 whole). The file is the one
// named if nothing comes before it (then nothing can be skipped), or if
// the file before it is the one the checkpoint came from.
func (f *Follower) startsAt(files []*file, i int) (bool, error) {
	if i == 0 {
		return true, nil
	}
	if f.cp.Rotated == (FileID{}) {
		return false, nil
	}
	prev, err := files[i-1].id()
	return prev.same(f.cp.Rotated), err
}

// step reads what it can from the chosen file; progressed is false when
// there was nothing to do, so Run may sleep.
func (f *Follower) step(ctx context.Context, h Handler) (progressed bool, err error) {
	opened := time.Now()
	files, err := openAll(f.path)
	if err != nil {
		return false, err
	}
	defer closeAll(files)
	i, err := f.choose(files)
	if err != nil {
		return false, err
	}
	if i < 0 {
		// No file yet: nothing was written to read.
		f.caughtUp.Store(opened.UnixNano())
		return false, nil
	}
	target := files[i]
	progressed, err = f.drain(ctx, target, h)
	if err != nil || i == len(files)-1 {
		if err == nil {
			// Every line written before the files were opened is
			// handled (a torn tail was still being written then).
			f.caughtUp.Store(opened.UnixNano())
		}
		return progressed, err
	}
	// A rotated file gets no more writes (the hook renames under its lock,
	// between whole lines), so what is left is a torn line.
	if rest := target.size - f.cp.Offset; rest > 0 && f.Skipped != nil {
		f.Skipped(Skip{File: target.name, Offset: f.cp.Offset, Size: rest, Reason: "incomplete last line of rotated file"})
	}
	id, err := target.id()
	if err != nil {
		return progressed, err
	}
	f.cp = files[i+1].start(id)
	return true, nil
}

// drain hands over the complete lines of x from f.cp.Offset on.
func (f *Follower) drain(ctx context.Context, x *file, h Handler) (progressed bool, err error) {
	// Read only up to the size seen at open: a rotated file is judged
	// finished against that size.
	br := bufio.NewReaderSize(io.NewSectionReader(x, f.cp.Offset, x.size-f.cp.Offset), 64<<10)
	for {
		if err := ctx.Err(); err != nil {
			return progressed, err
		}
		// Saved before the next line, not after the last: a Flush that
		// fails stops the handling here, so what it keeps back stays
		// bounded by Batch lines.
		if f.pending >= f.Batch {
			if err := f.persist(ctx); err != nil {
				return progressed, err
			}
		}
		line, size, over, err := f.readLine(br)
		if errors.Is(err, io.EOF) {
			return progressed, nil // nothing more, or a line still being written
		}
		if err != nil {
			return progressed, fmt.Errorf("read findings %q: %w", x.name, err)
		}
		switch {
		case over:
			if f.Skipped != nil {
				f.Skipped(Skip{File: x.name, Offset: f.cp.Offset, Size: size, Reason: fmt.Sprintf("line longer than %d bytes", f.MaxLine)})
			}
		case len(line) == 0:
			// Blank lines carry nothing; not worth counting as malformed.
		default:
			if err := h(ctx, line); err != nil {
				return progressed, fmt.Errorf("handle line at %q offset %d: %w", x.name, f.cp.Offset, err)
			}
		}
		if err := f.advance(x, size); err != nil {
			return progressed, err
		}
		progressed = true
		// A backlog is drained in one go round Run's loop (a generation
		// of thousands of lines at the API's pace takes minutes): each
		// line handled is a sign of life, or the liveness probe would
		// restart a consumer that is catching up.
		f.Touch()
	}
}

// readLine returns the next complete line without its newline. A line longer
// than MaxLine is read to its end but not kept (over is true). io.EOF means
// no complete line is there yet.
func (f *Follower) readLine(br *bufio.Reader) (line []byte, size int64, over bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		size += int64(len(chunk))
		if !over {
			if len(line)+len(chunk) > f.MaxLine+1 {
				over, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case err == nil:
			if over {
				return nil, size, true, nil
			}
			return line[:len(line)-1], size, false, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, 0, false, err
		}
	}
}

func (f *Follower) advance(x *file, size int64) error {
	if f.cp.FirstLine == "" {
		sum, _, err := firstLineHash(x)
		if err != nil {
			return fmt.Errorf("read findings %q: %w", x.name, err)
		}
		// An empty sum (the first line vanished under a truncation) makes
		// the next identity check fail, which restarts at 0: right, since
		// the file was truncated.
		f.cp.FirstLine = sum
	}
	f.cp.Offset += size
	f.pending++
	return nil
}
