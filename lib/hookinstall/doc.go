// Package hookinstall puts the hook binary and its hooks.d JSON onto a
// node's root filesystem and takes them off again, and tells which hooks
// directories the node's CRI-O reads.
//
// It takes a root directory (the node's "/" as the installer sees it, e.g.
// a host mount in a container), node paths for the binary and the hooks
// directory, and the bytes to write. It gives files in place or an error.
//
// Invariants:
//   - the binary is in place before the JSON, and the JSON is gone before
//     the binary: a JSON naming a missing binary breaks container creation
//     (or, with the guard, makes CRI-O skip the hook until the directory
//     changes again);
//   - a file is never visible half-written: it is written to a temporary
//     name in the same directory (one CRI-O ignores: no ".json" suffix),
//     synced, then renamed over the old one;
//   - every path is resolved inside the root (openat2 RESOLVE_IN_ROOT): a
//     symlink on the node (RHCOS's /usr/local -> /var/usrlocal) is followed
//     the way the node sees it and can never lead out of the root;
//   - re-running with the same bytes changes nothing on disk;
//   - CRI-O's configuration is read as CRI-O reads it (its TOML library,
//     crio.conf then crio.conf.d walked in its order): a configuration
//     CRI-O would refuse is an error, never "hooks_dir not set".
package hookinstall
