// Package follow reads complete lines of the findings file, the way both
// consumers need it: from a saved checkpoint, across rotation and truncation,
// never locking the file the hook appends to.
//
// API (the consumers are written against it):
//
//	type Handler func(line []byte) error
//	func New(path, checkpointPath string) *Follower
//	func (f *Follower) Run(ctx context.Context, h Handler) error  // follows until ctx is done
//	func (f *Follower) Once(ctx context.Context, h Handler) error // handles what is there now, then returns
//
// A nil error from the handler moves the checkpoint past the line (saved
// atomically); an error leaves the checkpoint where it was and the same line
// is handed over again later, so nothing is lost or duplicated.
package follow
