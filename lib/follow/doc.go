// Package follow reads complete lines of the findings file, the way both
// consumers need it: from a saved checkpoint, across rotation and truncation,
// never locking the file the hook appends to.
//
// API (the consumers are written against it):
//
//	type Handler func(ctx context.Context, line []byte) error
//	type Store interface { Load() (Checkpoint, error); Save(Checkpoint) error }
//	func New(path string, store Store) *Follower
//	func (f *Follower) Run(ctx context.Context, h Handler) error  // follows until ctx is done
//	func (f *Follower) Once(ctx context.Context, h Handler) error // handles what is there now, then returns
//	func LockDir(ctx context.Context, dir string, perm os.FileMode, busy func()) (*os.File, error) // one consumer a checkpoint directory
//
// A nil error from the handler moves the checkpoint past the line (saved
// atomically); an error leaves the checkpoint where it was and the same line
// is handed over again later, so nothing is lost or duplicated.
//
// Takes: the path the hook appends to (rotated by renaming PATH.k to
// PATH.k+1 and PATH to PATH.1) and a checkpoint store. Gives: each complete,
// non-empty line, without its newline, in file order, oldest generation
// first (PATH.N ... PATH.1, then PATH); oversized lines and the torn tail of
// a rotated file go to Follower.Skipped so the consumer can count them as
// malformed.
//
// The file the checkpoint points into is found by inode and first-line
// hash wherever rotation has moved it, and finished before the next newer
// one. A copy of it under another inode (logrotate's copytruncate) is
// recognised by the first-line hash and finished where the checkpoint left
// off, then the truncated original is read from its start: no line twice.
// At the start of a file, with no first line read, the inode number is not
// enough (a rotation frees the number of the file it removes for the next
// file made): the file's birth time (statx) tells it, where the filesystem
// gives one and no file before it, other than the one the checkpoint came
// from, was born in the same tick of the kernel's coarse clock; the
// generations born after it, back to that one, are copytruncate copies of
// it made while the follower was stopped, read first. Without birth times
// the file is the one named only if the file before it is the one the
// checkpoint came from, or nothing comes before it. A copy destroyed
// unread (two copytruncates into a single kept generation while the
// follower was stopped) is lost with no gap said: what is left cannot
// tell it ever was.
//
// Invariant: the checkpoint (device, inode, birth time, SHA-256 of the
// first line, offset after the last handled newline) never moves past a line whose handler has
// not returned nil, and is only ever replaced atomically (temp file, fsync,
// rename, fsync of the directory).
//
// Exactly once, and where it is really "at least once": the handler runs
// first, the checkpoint is saved afterwards (every Batch lines and whenever
// the follower runs out of lines). A crash between the two replays the lines
// handled since the last save. Consumers make handling idempotent: the
// forwarder names Events deterministically so a replay gets AlreadyExists;
// the textfile collector keeps a latest-per-pod map and is itself the Store:
// it saves its counters and the checkpoint in one atomic write, so even its
// counters see each line once.
//
// A damaged saved checkpoint (ErrDamaged: torn, garbage) is not fatal: the
// follower tells Reset and starts over from the oldest line, a replay.
//
// What cannot be delivered: lines destroyed before the follower read them
// (a file rotated past the last generation, or truncated in place without a
// copy, while the follower was behind or not running): the follower says
// each such gap to Skipped (Size -1), so it is counted and logged. A file
// that does not exist yet is waited for.
package follow
