// Package jsonschema writes the JSON Schemas (draft 2020-12) published in
// docs/schema from the Go types that encode the files and outputs: the
// schemas cannot drift from the writers, and a field added to a type is a
// field added to its schema by `make schema` (TestSchemasUpToDate fails
// until then). Every object is closed (additionalProperties: false), so a
// record that carries a field its schema does not declare fails to
// validate: the point of publishing them is that a consumer knows every
// field it may meet.
//
// It follows encoding/json's rules (json tags, omitempty and omitzero make
// a field optional, embedded structs are flattened); descriptions come from
// the Go doc comments of the types and fields in this module.
package jsonschema

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"
)

// Module is this module's path: doc comments are read from its packages.
const Module = "github.com/iptables-alerter/iptables-alerter"

// Spec says what one schema describes.
type Spec struct {
	// ID is the schema's $id, Title and Description its header.
	ID, Title, Description string
	// Root is a value of the top-level type.
	Root any
	// Enums gives the values a named type may take (a State).
	Enums map[reflect.Type][]string
	// FieldEnums gives the values of one field, by "Type.jsonname"
	// ("Record.worst"): plain strings whose values are a closed set.
	FieldEnums map[string][]string
}

// Generator builds schemas; RepoRoot is where the module's sources are.
type Generator struct {
	RepoRoot string
	docs     map[string]map[string]string // package path -> "Type" or "Type.Field" -> doc
}

// Generate returns the indented schema of spec, ending in a newline.
func (g *Generator) Generate(spec Spec) ([]byte, error) {
	w := &walker{g: g, spec: spec, defs: map[string]any{}, owners: map[string]reflect.Type{}}
	root, err := w.object(reflect.TypeOf(spec.Root))
	if err != nil {
		return nil, err
	}
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = spec.ID
	root["title"] = spec.Title
	root["description"] = spec.Description
	if len(w.defs) > 0 {
		root["$defs"] = w.defs
	}
	b, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

type walker struct {
	g      *Generator
	spec   Spec
	defs   map[string]any
	owners map[string]reflect.Type // def name -> its type, to refuse two types of one name
}

var timeType = reflect.TypeOf(time.Time{})

// schema is the schema of a value of type t; nullable when encoding/json
// may write null for it (nil slices, maps and pointers).
func (w *walker) schema(t reflect.Type) (map[string]any, error) {
	if vals, ok := w.spec.Enums[t]; ok {
		return map[string]any{"type": "string", "enum": vals}, nil
	}
	if t == timeType {
		return map[string]any{"type": "string", "format": "date-time"}, nil
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Slice, reflect.Array:
		items, err := w.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": []string{"array", "null"}, "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("jsonschema: map key of %s is not a string", t)
		}
		vals, err := w.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": []string{"object", "null"}, "additionalProperties": vals}, nil
	case reflect.Pointer:
		inner, err := w.schema(t.Elem())
		if err != nil {
			return nil, err
		}
		return map[string]any{"anyOf": []any{inner, map[string]any{"type": "null"}}}, nil
	case reflect.Struct:
		return w.ref(t)
	}
	return nil, fmt.Errorf("jsonschema: no schema for %s", t)
}

// ref puts a struct's schema in $defs, once, and refers to it.
func (w *walker) ref(t reflect.Type) (map[string]any, error) {
	name := t.Name()
	if name == "" {
		return w.object(t)
	}
	if prev, ok := w.owners[name]; ok {
		if prev != t {
			return nil, fmt.Errorf("jsonschema: two types named %s (%s, %s)", name, prev, t)
		}
	} else {
		w.owners[name] = t
		obj, err := w.object(t)
		if err != nil {
			return nil, err
		}
		w.defs[name] = obj
	}
	return map[string]any{"$ref": "#/$defs/" + name}, nil
}

// object is a closed object schema of struct t's JSON fields.
func (w *walker) object(t reflect.Type) (map[string]any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("jsonschema: %s is not a struct", t)
	}
	props := map[string]any{}
	required := []string{}
	if err := w.fields(t, t, props, &required); err != nil {
		return nil, err
	}
	obj := map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	if d := w.g.doc(t, ""); d != "" {
		obj["description"] = d
	}
	return obj, nil
}

// fields adds t's JSON fields (embedded ones flattened) to props; owner is
// the type whose doc comments name them.
func (w *walker) fields(t, owner reflect.Type, props map[string]any, required *[]string) error {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if err := w.fields(ft, ft, props, required); err != nil {
					return err
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s, err := w.schema(f.Type)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", t.Name(), f.Name, err)
		}
		if vals, ok := w.spec.FieldEnums[t.Name()+"."+name]; ok {
			s = map[string]any{"type": "string", "enum": vals}
		}
		if d := w.g.doc(owner, f.Name); d != "" {
			if _, isRef := s["$ref"]; isRef {
				// A $ref's siblings are allowed in 2020-12, but say it on its own.
				s = map[string]any{"allOf": []any{s}, "description": d}
			} else {
				s["description"] = d
			}
		}
		props[name] = s
		if !hasOpt(opts, "omitempty") && !hasOpt(opts, "omitzero") {
			*required = append(*required, name)
		}
	}
	sort.Strings(*required)
	return nil
}

func hasOpt(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// doc is the doc comment of type t (field "") or of its field, from the
// module's sources; "" outside the module.
func (g *Generator) doc(t reflect.Type, field string) string {
	pkg := t.PkgPath()
	if g.RepoRoot == "" || !strings.HasPrefix(pkg, Module) {
		return ""
	}
	if g.docs == nil {
		g.docs = map[string]map[string]string{}
	}
	m, ok := g.docs[pkg]
	if !ok {
		m = readDocs(filepath.Join(g.RepoRoot, strings.TrimPrefix(pkg, Module)))
		g.docs[pkg] = m
	}
	key := t.Name()
	if field != "" {
		key += "." + field
	}
	return m[key]
}

// readDocs maps "Type" and "Type.Field" to their doc comments, one line.
func readDocs(dir string) map[string]string {
	m := map[string]string{}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		return m
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					doc := ts.Doc
					if doc == nil && len(gd.Specs) == 1 {
						doc = gd.Doc
					}
					m[ts.Name.Name] = flat(doc)
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, fl := range st.Fields.List {
						d := flat(fl.Doc)
						if d == "" {
							d = flat(fl.Comment)
						}
						for _, n := range fl.Names {
							m[ts.Name.Name+"."+n.Name] = d
						}
					}
				}
			}
		}
	}
	return m
}

func flat(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}
	return strings.Join(strings.Fields(cg.Text()), " ")
}
