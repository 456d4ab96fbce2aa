package hookinstall

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// CRIODefaultHooksDirs is what CRI-O reads when no configuration sets
// hooks_dir: upstream CRI-O's built-in default. OpenShift's configuration
// adds /etc/containers/oci/hooks.d and /run/containers/oci/hooks.d.
var CRIODefaultHooksDirs = []string{"/usr/share/containers/oci/hooks.d"}

// CRIO is what a node's CRI-O configuration says about hooks.
type CRIO struct {
	// Found: a CRI-O configuration file exists on the node.
	Found bool
	// HooksDirs are the directories CRI-O reads hooks from.
	HooksDirs []string
	// Source names where HooksDirs came from, for messages.
	Source string
}

// ReadCRIOConfig reads root/etc/crio/crio.conf and then every file of
// root/etc/crio/crio.conf.d in name order, as CRI-O does: a later
// hooks_dir replaces an earlier one.
func ReadCRIOConfig(root string) (CRIO, error) {
	c := CRIO{HooksDirs: CRIODefaultHooksDirs, Source: "CRI-O's built-in default"}
	files := []string{filepath.Join(root, "etc/crio/crio.conf")}
	dropins := filepath.Join(root, "etc/crio/crio.conf.d")
	ents, err := os.ReadDir(dropins)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return c, fmt.Errorf("read directory %q: %w", dropins, err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0 {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		files = append(files, filepath.Join(dropins, n))
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return c, fmt.Errorf("read CRI-O configuration %q: %w", p, err)
		}
		c.Found = true
		dirs, ok, err := ParseHooksDir(string(data))
		if err != nil {
			return c, fmt.Errorf("parse CRI-O configuration %q: %w", p, err)
		}
		if ok {
			c.HooksDirs, c.Source = dirs, "hooks_dir in "+strings.TrimPrefix(p, strings.TrimSuffix(root, "/"))
		}
	}
	return c, nil
}

var (
	tableRe  = regexp.MustCompile(`^\s*\[\s*([A-Za-z0-9_.\-"]+)\s*\]\s*$`)
	hooksRe  = regexp.MustCompile(`^\s*hooks_dir\s*=\s*(.*)$`)
	quotedRe = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"|'([^']*)'`)
)

// ParseHooksDir finds hooks_dir in the [crio.runtime] table of a CRI-O
// TOML configuration (a crio.conf file or what `crio config` prints). ok
// is false when it is not set there.
func ParseHooksDir(text string) (dirs []string, ok bool, err error) {
	table := ""
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := stripComment(lines[i])
		if m := tableRe.FindStringSubmatch(line); m != nil {
			table = strings.ReplaceAll(m[1], `"`, "")
			continue
		}
		m := hooksRe.FindStringSubmatch(line)
		if m == nil || table != "crio.runtime" {
			continue
		}
		val := m[1]
		// An array may span lines until its closing bracket.
		for !strings.Contains(val, "]") && i+1 < len(lines) {
			i++
			val += " " + stripComment(lines[i])
		}
		val = strings.TrimSpace(val)
		if !strings.HasPrefix(val, "[") || !strings.HasSuffix(val, "]") {
			return nil, false, fmt.Errorf("parse hooks_dir %q: not an array of strings", val)
		}
		dirs = []string{}
		for _, q := range quotedRe.FindAllStringSubmatch(val, -1) {
			dirs = append(dirs, filepath.Clean(q[1]+q[2]))
		}
		ok = true
	}
	return dirs, ok, nil
}

// stripComment cuts a "#" comment that is not inside a string.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote == 0 && (r == '"' || r == '\''):
			quote = r
		case quote == 0 && r == '#':
			return line[:i]
		}
	}
	return line
}

// ErrNotRead is returned (wrapped) when CRI-O does not read a hooks directory.
var ErrNotRead = errors.New("CRI-O does not read this hooks directory")

// Check says whether CRI-O reads dir, and when not, which directories to
// use instead.
func (c CRIO) Check(dir string) error {
	if slices.Contains(c.HooksDirs, filepath.Clean(dir)) {
		return nil
	}
	return fmt.Errorf("check hooks directory %q: %w: it reads only %s (%s); install into one of those, or add %q to hooks_dir in a file under /etc/crio/crio.conf.d/ and restart CRI-O",
		dir, ErrNotRead, strings.Join(c.HooksDirs, ", "), c.Source, dir)
}
