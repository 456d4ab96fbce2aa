package hookinstall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// noCRIO is everywhere CRI-O was looked for.
const noCRIO = "no configuration file, socket, crio binary in a standard directory or on PATH, nor crio running"

// Decide reads the CRI-O of the node seen at root and tells whether to
// install for runtime ("auto": CRI-O when found; "crio"; "none"), after
// checking that CRI-O reads hooksDir unless noCheck. note is the line to
// tell the admin ("" for none); err is an unreadable CRI-O configuration
// or a hooksDir CRI-O does not read. With checkOnly nothing is to be
// installed whatever install says.
func Decide(ctx context.Context, root, hooksDir, runtime string, noCheck, checkOnly bool) (install bool, note string, err error) {
	crio, err := NodeCRIO(ctx, root)
	if err != nil {
		return false, "", err
	}
	install = runtime == "crio" || (runtime == "auto" && crio.Found)
	if !install && !checkOnly {
		return false, fmt.Sprintf("no CRI-O under %s (%s): nothing installed (containerd and other runtimes without hooks.d are covered by the NRI agent)", root, noCRIO), nil
	}
	// Without any configuration file a CRI-O forced by --runtime crio
	// runs on its built-in default.
	switch {
	case noCheck:
	case crio.Found || runtime == "crio":
		if err := crio.Check(hooksDir); err != nil {
			return false, "", err
		}
		note = fmt.Sprintf("CRI-O reads %s (%s)", hooksDir, crio.Source)
	case runtime == "none":
		note = "hooks directory not checked (--runtime none)"
	default:
		note = fmt.Sprintf("no CRI-O under %s (%s): hooks directory not checked; --runtime crio checks it against CRI-O's built-in default, --runtime none says no check is wanted", root, noCRIO)
	}
	return install, note, nil
}

// Load fills f.Binary from the file binary ("": f.BinaryName next to
// this program) and, unless noJSON, f.JSON from the file jsonPath ("":
// builtin), its path rewritten for f.BinDir, and refused when CRI-O
// would refuse it (CheckJSON).
func (f *Files) Load(binary, jsonPath string, builtin []byte, noJSON bool) error {
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this program: %w", err)
		}
		binary = filepath.Join(filepath.Dir(exe), f.BinaryName)
	}
	var err error
	if f.Binary, err = os.ReadFile(binary); err != nil {
		return fmt.Errorf("read hook binary: %w", err)
	}
	if noJSON {
		return nil
	}
	json := builtin
	if jsonPath != "" {
		if json, err = os.ReadFile(jsonPath); err != nil {
			return fmt.Errorf("read hooks.d JSON: %w", err)
		}
	}
	f.JSON = BinaryPath(json, f.BinDir)
	if err := CheckJSON(f.JSON); err != nil {
		return fmt.Errorf("%w: CRI-O would not start with it, nothing installed", err)
	}
	return nil
}
