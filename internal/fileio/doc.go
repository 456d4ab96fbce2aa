// Package fileio is the one place for the file idioms every step needs:
// a bounded read of a small file, an atomic replace, and opening a file
// the hook writes without following a planted link.
//
// Invariants: a read never follows a symlink at the last component, never
// blocks on a FIFO or device planted at the path, accepts only a regular
// file and never reads more than its bound (plus one byte to tell). A write
// is seen whole or not at all. What the hook opens for writing is never
// reached through a symlink, never a hard link to another file, and is left
// without group or other write permission.
package fileio
