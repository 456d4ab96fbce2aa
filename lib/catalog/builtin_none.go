//go:build nobuiltin

package catalog

// builtinTable is empty in the nobuiltin build, which only `make vendors`
// uses: its test writes builtin.go even when the one there no longer
// compiles (a field of Entry or Rule renamed or removed).
var builtinTable []Entry
