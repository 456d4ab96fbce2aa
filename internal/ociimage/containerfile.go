package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
)

// spec is what packaging/Containerfile says an image holds. The release
// reads the same file `make image` gives podman, so the two images cannot
// drift apart; it understands only the instructions a FROM scratch image
// of copied files needs, and refuses any other (a RUN would need a
// builder, and this tool is not one).
type spec struct {
	Labels     map[string]string
	Copies     []copyOp
	User       string
	Entrypoint []string
	Cmd        []string
}

// copyOp is one COPY: files of the build context into the image.
type copyOp struct {
	Srcs []string
	Dst  string // a directory when it ends in "/"
}

// Targets maps each source file to its path in the image.
func (c copyOp) Targets() (map[string]string, error) {
	out := map[string]string{}
	if !strings.HasSuffix(c.Dst, "/") {
		if len(c.Srcs) != 1 {
			return nil, fmt.Errorf("COPY of %d files to %s: the destination must end in /", len(c.Srcs), c.Dst)
		}
		out[c.Srcs[0]] = c.Dst
		return out, nil
	}
	for _, s := range c.Srcs {
		out[s] = path.Join(c.Dst, path.Base(s))
	}
	return out, nil
}

// parseContainerfile reads the instructions of data; args are the
// --build-arg values, which win over each ARG's default.
func parseContainerfile(data string, args map[string]string) (*spec, error) {
	s := &spec{Labels: map[string]string{}}
	vars := map[string]string{}
	from := false
	for _, line := range logicalLines(data) {
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			if rest != "scratch" {
				return nil, fmt.Errorf("FROM %s: only FROM scratch is built here", rest)
			}
			from = true
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			if v, ok := args[name]; ok {
				def = v
			}
			vars[name] = def
		case "LABEL":
			words, err := shellWords(rest)
			if err != nil {
				return nil, fmt.Errorf("LABEL: %w", err)
			}
			for _, w := range words {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					return nil, fmt.Errorf("LABEL %q: not key=value", w)
				}
				s.Labels[k] = os.Expand(v, func(n string) string { return vars[n] })
			}
		case "COPY":
			f := strings.Fields(rest)
			if len(f) < 2 || strings.HasPrefix(f[0], "--") {
				return nil, fmt.Errorf("COPY %s: want COPY SRC... DST without flags", rest)
			}
			s.Copies = append(s.Copies, copyOp{Srcs: f[:len(f)-1], Dst: f[len(f)-1]})
		case "USER":
			s.User = rest
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				return nil, fmt.Errorf("%s %s: only the JSON (exec) form is built here: %w", instr, rest, err)
			}
			if strings.ToUpper(instr) == "CMD" {
				s.Cmd = v
			} else {
				s.Entrypoint = v
			}
		default:
			return nil, fmt.Errorf("%s: not an instruction this tool builds (only FROM scratch, ARG, LABEL, COPY, USER, ENTRYPOINT, CMD)", instr)
		}
		if !from && strings.ToUpper(instr) != "ARG" {
			return nil, fmt.Errorf("%s before FROM", instr)
		}
	}
	if !from {
		return nil, fmt.Errorf("no FROM")
	}
	return s, nil
}

// logicalLines drops comments and blank lines and joins the lines that a
// trailing backslash continues.
func logicalLines(data string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(data, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") || (t == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur += strings.TrimSuffix(t, "\\") + " "
			continue
		}
		out = append(out, strings.TrimSpace(cur+t))
		cur = ""
	}
	if strings.TrimSpace(cur) != "" {
		out = append(out, strings.TrimSpace(cur))
	}
	return out
}

// shellWords splits s at unquoted blanks and removes double quotes, as a
// LABEL's key="value with blanks" pairs need.
func shellWords(s string) ([]string, error) {
	var out []string
	var w strings.Builder
	in, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			quoted, in = !quoted, true
		case c == '\\' && quoted && i+1 < len(s):
			i++
			w.WriteByte(s[i])
		case (c == ' ' || c == '\t') && !quoted:
			if in {
				out = append(out, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if in {
		out = append(out, w.String())
	}
	return out, nil
}
