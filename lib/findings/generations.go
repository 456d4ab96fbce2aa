package findings

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// GenerationName is the name of rotated generation k (1 newest) of the
// findings file at path: PATH.k. Log.rotate writes these names and
// Generations reads them back; nothing else spells them.
func GenerationName(path string, k int) string { return path + "." + strconv.Itoa(k) }

// generationOf parses a directory entry as a generation of the file
// named base: its k, or false when it is none (PATH.01, PATH.x).
func generationOf(base, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, base+".")
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(rest)
	return k, err == nil && k > 0 && strconv.Itoa(k) == rest
}

// Generations lists PATH.N ... PATH.1, PATH: the rotated files, oldest
// first, then the current one. The hook keeps DefaultGenerations of them;
// whatever is there is read, so a longer history left by an earlier
// setting is finished too.
func Generations(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list findings directory %q: %w", dir, err)
	}
	var gens []int
	for _, e := range ents {
		if k, ok := generationOf(base, e.Name()); ok {
			gens = append(gens, k)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(gens)))
	names := make([]string, 0, len(gens)+1)
	for _, k := range gens {
		names = append(names, GenerationName(path, k))
	}
	return append(names, path), nil
}
