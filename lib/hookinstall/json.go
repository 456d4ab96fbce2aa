package hookinstall

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
)

// hookVersion is the hooks.d schema CRI-O and podman read (their hooks
// library's 1.0.0).
const hookVersion = "1.0.0"

// stages are the stages that library knows (no extension stages are
// configured by CRI-O).
var stages = map[string]bool{"prestart": true, "createRuntime": true, "createContainer": true,
	"startContainer": true, "poststart": true, "poststop": true}

// CheckJSON refuses a hooks.d JSON CRI-O would refuse: at its start CRI-O
// reads every file of its hooks directories and stops on any it cannot
// parse or validate (a version other than 1.0.0, no hook path, a
// regular expression that does not compile, no stages or an unknown one),
// so a node whose CRI-O restarts with it runs no container. The hook's
// binary need not exist yet (installed beside it; CRI-O skips such a
// file).
func CheckJSON(b []byte) error {
	var h struct {
		Version string `json:"version"`
		Hook    struct {
			Path string `json:"path"`
		} `json:"hook"`
		When struct {
			Annotations map[string]string `json:"annotations"`
			Commands    []string          `json:"commands"`
		} `json:"when"`
		Stages []string `json:"stages"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("hooks.d JSON does not parse: %w", err)
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
	case h.Version != hookVersion:
		return fmt.Errorf("hooks.d JSON: version %q, CRI-O reads %q", h.Version, hookVersion)
	case h.Hook.Path == "":
		return errors.New("hooks.d JSON: no hook.path")
	case h.Stages == nil:
		return errors.New("hooks.d JSON: no stages")
	}
	for _, s := range h.Stages {
		if !stages[s] {
			return fmt.Errorf("hooks.d JSON: unknown stage %q", s)
		}
	}
	return nil
}
