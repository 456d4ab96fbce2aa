// Package ipset reads the names of a network namespace's ipsets by their
// kernel index. An xt "set" match holds only that index; the name, which is
// what an admin reads and an allowlist entry names, lives with ipset.
//
// It takes a netns handle and the indexes rules use, and gives index→name.
//
// Invariant: it only asks (IP_SET_OP_GET_BYINDEX), never creates, changes
// or lists a set. The question takes ipset's host-wide netlink mutex, which
// another pod can hold for long (flushing a huge set in a loop), and a
// thread waiting for it cannot be killed; so the question runs in a child
// process (Probe) that the caller abandons at its deadline, and the answer
// is then partial with ErrBusy.
package ipset
