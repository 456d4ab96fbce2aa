package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// childPath is the import path of the package that runs probes.
const childPath = "github.com/iptables-alerter/iptables-alerter/internal/child"

// TestProbesListed: every probe the module's code declares is in the table
// main gives child.Main, once. Go cannot make main list every value of a
// type, so this test does: a *child.Probe comes only from child.NewProbe,
// and child.Start takes nothing else, so the NewProbe calls in the source
// are every probe lib code can start.
func TestProbesListed(t *testing.T) {
	declared := declaredProbes(t, "..")
	listed := map[string]bool{}
	for _, p := range probes {
		if listed[p.Name()] {
			t.Errorf("probe %q listed twice in probes", p.Name())
		}
		listed[p.Name()] = true
	}
	for name, where := range declared {
		if !listed[name] {
			t.Errorf("probe %q (%s) is not in probes (probes.go): its child.Start would fail", name, where)
		}
	}
	for name := range listed {
		if _, ok := declared[name]; !ok {
			t.Errorf("probe %q of probes not found in the source: the scan here misses declarations", name)
		}
	}
}

// declaredProbes finds the child.NewProbe calls in the non-test Go files
// under root, by probe name and place. A call must be the value of an
// exported package-level variable, with the name a string literal, so main
// can list it and this test can read it.
func declaredProbes(t *testing.T, root string) map[string]string {
	t.Helper()
	found := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		local := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == childPath {
				local = "child"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			return nil
		}
		isNewProbe := func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return false
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "NewProbe" {
				return false
			}
			x, ok := sel.X.(*ast.Ident)
			return ok && x.Name == local
		}
		// Calls in the right place, then any call at all.
		good := map[ast.Node]bool{}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				for i, val := range v.Values {
					if !isNewProbe(val) || i >= len(v.Names) || !v.Names[i].IsExported() {
						continue
					}
					lit, ok := val.(*ast.CallExpr).Args[0].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					name, _ := strconv.Unquote(lit.Value)
					where := path + ": " + v.Names[i].Name
					if prev, dup := found[name]; dup {
						t.Errorf("probe name %q declared twice: %s and %s", name, prev, where)
					}
					found[name] = where
					good[val] = true
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if isNewProbe(n) && !good[n] {
				t.Errorf("%s: child.NewProbe not the value of an exported package-level var with a literal name: main cannot list it", path)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
