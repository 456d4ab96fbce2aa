package hookinstall

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// stages are the stages CRI-O's hooks library knows (no extension stages
// are configured by CRI-O).
var stages = map[string]bool{"prestart": true, "createRuntime": true, "createContainer": true,
	"startContainer": true, "poststart": true, "poststop": true}

// KnownStage tells a stage CRI-O's hooks library knows: one unknown stage
// in a hooks.d file stops CRI-O at its start.
func KnownStage(s string) bool { return stages[s] }

// File is a hooks.d file as CRI-O's hooks library reads it (version
// 1.0.0), with the same types: a field of another type fails to decode
// there too.
type File struct {
	Version string     `json:"version"`
	Hook    rspec.Hook `json:"hook"`
	When    struct {
		Always        *bool             `json:"always"`
		Annotations   map[string]string `json:"annotations"`
		Commands      []string          `json:"commands"`
		HasBindMounts *bool             `json:"hasBindMounts"`
	} `json:"when"`
	Stages []string `json:"stages"`
}

// oldHook is the library's version 0.1.0 (and no version), which it
// reads into a 1.0.0 hook.
type oldHook struct {
	Hook          *string  `json:"hook"`
	Arguments     []string `json:"arguments"`
	Stages        []string `json:"stages"`
	Stage         []string `json:"stage"`
	Cmds          []string `json:"cmds"`
	Cmd           []string `json:"cmd"`
	Annotations   []string `json:"annotations"`
	Annotation    []string `json:"annotation"`
	HasBindMounts *bool    `json:"hasbindmounts"`
}

// CheckJSON refuses a hooks.d JSON CRI-O would refuse: at its start CRI-O
// reads every file of its hooks directories and stops on any it cannot
// parse or validate (not JSON, a version it does not know, a field of
// another type, no hook path, a regular expression that does not
// compile, no stages or an unknown one), so a node whose CRI-O restarts
// with it runs no container. A hook binary that does not exist (yet) is
// no error: CRI-O skips such a file.
func CheckJSON(b []byte) error {
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("hooks.d JSON does not parse: %w", err)
	}
	var h File
	switch v.Version {
	case "1.0.0":
		if err := json.Unmarshal(b, &h); err != nil {
			return fmt.Errorf("hooks.d JSON: %w", err)
		}
	case "0.1.0", "":
		var err error
		if h, err = readOld(b); err != nil {
			return fmt.Errorf("hooks.d JSON (version %q): %w", v.Version, err)
		}
	default:
		return fmt.Errorf("hooks.d JSON: version %q, CRI-O reads 1.0.0 (and 0.1.0)", v.Version)
	}
	var exprs []string
	for k, v := range h.When.Annotations {
		exprs = append(exprs, k, v)
	}
	for _, e := range append(exprs, h.When.Commands...) {
		if _, err := regexp.Compile(e); err != nil {
			return fmt.Errorf("hooks.d JSON: when: %w", err)
		}
	}
	switch {
	case h.Hook.Path == "":
		return errors.New("hooks.d JSON: no hook.path")
	case h.Stages == nil:
		return errors.New("hooks.d JSON: no stages")
	}
	for _, s := range h.Stages {
		if !KnownStage(s) {
			return fmt.Errorf("hooks.d JSON: unknown stage %q", s)
		}
	}
	return nil
}

// readOld reads a 0.1.0 file as the library does: its singular and
// plural spellings, one of each at most.
func readOld(b []byte) (File, error) {
	var o oldHook
	var h File
	if err := json.Unmarshal(b, &o); err != nil {
		return h, err
	}
	one := func(name string, plural, singular []string) ([]string, error) {
		if plural != nil && singular != nil {
			return nil, fmt.Errorf("cannot set both %q and %q", name, name+"s")
		}
		if plural == nil {
			return singular, nil
		}
		return plural, nil
	}
	if o.Hook == nil {
		return h, errors.New("missing required property: hook")
	}
	var err error
	if h.Stages, err = one("stage", o.Stages, o.Stage); err != nil {
		return h, err
	}
	if h.Stages == nil {
		return h, errors.New("missing required property: stages")
	}
	if h.When.Commands, err = one("cmd", o.Cmds, o.Cmd); err != nil {
		return h, err
	}
	annotations, err := one("annotation", o.Annotations, o.Annotation)
	if err != nil {
		return h, err
	}
	if annotations != nil {
		h.When.Annotations = map[string]string{".*": strings.Join(annotations, "|")}
	}
	h.Hook.Path = *o.Hook
	return h, nil
}
