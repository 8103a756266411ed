package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// ---- chart values ---------------------------------------------------------------------

const chartDir = "deploy/chart/gcsfuse-csi"

func (g *gen) chartValues() error {
	rawSchema, err := os.ReadFile(filepath.Join(g.root, chartDir, "values.schema.json"))
	if err != nil {
		return err
	}
	var schema map[string]any
	if err := json.Unmarshal(rawSchema, &schema); err != nil {
		return fmt.Errorf("values.schema.json: %w", err)
	}
	rawValues, err := os.ReadFile(filepath.Join(g.root, chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	var values map[string]any
	if err := yaml.Unmarshal(rawValues, &values); err != nil {
		return fmt.Errorf("values.yaml: %w", err)
	}
	keys, err := scanValues(string(rawValues))
	if err != nil {
		return fmt.Errorf("values.yaml: %w", err)
	}
	c := &chart{defs: asMap(schema["definitions"]), comments: map[string]string{}, order: map[string]int{}}
	for i, k := range keys {
		c.comments[k.path] = k.comment
		c.order[k.path] = i
	}
	var rows [][]string
	if err := c.walk("", schema, values, false, &rows); err != nil {
		return err
	}
	for _, k := range keys {
		leaf := c.leafAbove(k.path)
		switch {
		case !c.seen[k.path] && leaf == "":
			return fmt.Errorf("values.yaml has %s, which values.schema.json does not describe", k.path)
		case leaf != "" && k.comment != "":
			return fmt.Errorf("values.yaml: the comment above %s would be lost: the reference shows %s whole; move the comment above it", k.path, leaf)
		}
	}
	g.p("")
	g.p("## Chart values")
	g.p("")
	g.p("The Helm chart's values (`" + chartDir + "`): what `values.schema.json` accepts, the default in")
	g.p("`values.yaml` and the comment above it there. Helm refuses any other key.")
	g.p("")
	g.header("value", "default", "accepts", "what it is")
	for _, r := range rows {
		g.row(r...)
	}
	return nil
}

type chart struct {
	defs     map[string]any
	comments map[string]string
	order    map[string]int
	seen     map[string]bool
	// leaves are the values shown whole (no properties in the schema), with what is under
	// them in values.yaml.
	leaves map[string]bool
}

// leafAbove is the value shown whole that path is under, "" for none.
func (c *chart) leafAbove(path string) string {
	for p := path; strings.Contains(p, "."); {
		p = p[:strings.LastIndex(p, ".")]
		if c.leaves[p] {
			return p
		}
	}
	return ""
}

// walk adds a row for every value under the schema s at path, in values.yaml's order (values
// it lacks after the others), and one for each object that has a comment there.
func (c *chart) walk(path string, s map[string]any, value any, required bool, rows *[][]string) error {
	if c.seen == nil {
		c.seen, c.leaves = map[string]bool{}, map[string]bool{}
	}
	s, err := c.resolve(s)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if path != "" {
		c.seen[path] = true
	}
	props := asMap(s["properties"])
	if len(props) == 0 {
		c.leaves[path] = true
		*rows = append(*rows, []string{code(path), defaultOf(value), c.accepts(s, required), md(c.comments[path])})
		return nil
	}
	if path != "" && c.comments[path] != "" {
		*rows = append(*rows, []string{code(path), "", "an object of the values below", md(c.comments[path])})
	}
	req := map[string]bool{}
	for _, r := range asSlice(s["required"]) {
		req[fmt.Sprint(r)] = true
	}
	var names []string
	for k := range props {
		names = append(names, k)
	}
	vals := asMap(value)
	sort.Slice(names, func(i, j int) bool {
		oi, iok := c.order[join(path, names[i])]
		oj, jok := c.order[join(path, names[j])]
		if iok != jok {
			return iok
		}
		if iok {
			return oi < oj
		}
		return names[i] < names[j]
	})
	for _, k := range names {
		v, ok := vals[k]
		if !ok {
			v = noDefault{}
		}
		if err := c.walk(join(path, k), asMap(props[k]), v, req[k], rows); err != nil {
			return err
		}
	}
	for k := range vals {
		if _, ok := props[k]; !ok {
			return fmt.Errorf("values.yaml has %s, which values.schema.json does not describe", join(path, k))
		}
	}
	return nil
}

type noDefault struct{}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func (c *chart) resolve(s map[string]any) (map[string]any, error) {
	for i := 0; i < 10; i++ {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s, nil
		}
		name, ok := strings.CutPrefix(ref, "#/definitions/")
		if !ok || c.defs[name] == nil {
			return nil, fmt.Errorf("unknown $ref %q", ref)
		}
		s = asMap(c.defs[name])
	}
	return nil, errors.New("$ref loop")
}

// accepts says what the schema s allows, in words.
func (c *chart) accepts(s map[string]any, required bool) string {
	s, err := c.resolve(s)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	var parts []string
	if t := typeWords(s["type"]); t != "" {
		parts = append(parts, t)
	}
	if e := asSlice(s["enum"]); e != nil {
		parts = append(parts, "one of "+literals(e))
	}
	if v, ok := s["const"]; ok {
		parts = append(parts, literals([]any{v}))
	}
	parts = append(parts, bounds(s)...)
	if p, ok := s["pattern"].(string); ok {
		parts = append(parts, "matching "+code(p))
	}
	if items, ok := s["items"].(map[string]any); ok {
		what := "list of "
		if s["uniqueItems"] == true {
			what = "list of distinct "
		}
		parts = []string{what + c.accepts(items, false)}
	}
	if ap, ok := s["additionalProperties"].(map[string]any); ok {
		parts = []string{"map of keys to " + c.accepts(ap, false)}
	}
	if props := asMap(s["properties"]); len(props) > 0 {
		var names []string
		for n := range props {
			names = append(names, code(n))
		}
		sort.Strings(names)
		parts = append(parts, "keys "+strings.Join(names, ", "))
	}
	if r := asSlice(s["required"]); r != nil {
		var names []string
		for _, n := range r {
			names = append(names, code(fmt.Sprint(n)))
		}
		parts = append(parts, strings.Join(names, ", ")+" required")
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts := asSlice(s[key]); alts != nil {
			var words []string
			for _, a := range alts {
				words = append(words, c.accepts(asMap(a), false))
			}
			parts = append(parts, strings.Join(words, " or "))
		}
	}
	out := strings.Join(parts, ", ")
	if required {
		out += "; required"
	}
	return out
}

func typeWords(t any) string {
	word := func(s string) string {
		switch s {
		case "array":
			return "list"
		case "object":
			return "map"
		}
		return s
	}
	switch t := t.(type) {
	case string:
		return word(t)
	case []any:
		var w []string
		for _, x := range t {
			w = append(w, word(fmt.Sprint(x)))
		}
		return strings.Join(w, " or ")
	}
	return ""
}

func bounds(s map[string]any) []string {
	num := func(k string) (string, bool) {
		f, ok := s[k].(float64)
		if !ok {
			return "", false
		}
		return strconv.FormatFloat(f, 'f', -1, 64), true
	}
	var out []string
	lo, hasLo := num("minimum")
	hi, hasHi := num("maximum")
	switch {
	case hasLo && hasHi:
		out = append(out, "from "+lo+" to "+hi)
	case hasLo:
		out = append(out, "at least "+lo)
	case hasHi:
		out = append(out, "at most "+hi)
	}
	chars := func(n string) string {
		if n == "1" {
			return n + " character"
		}
		return n + " characters"
	}
	if n, ok := num("minLength"); ok {
		out = append(out, "at least "+chars(n))
	}
	if n, ok := num("maxLength"); ok {
		out = append(out, "at most "+chars(n))
	}
	return out
}

func literals(vals []any) string {
	var out []string
	for _, v := range vals {
		switch v := v.(type) {
		case string:
			if v == "" {
				out = append(out, code(`""`))
			} else {
				out = append(out, code(v))
			}
		default:
			b, _ := json.Marshal(v)
			out = append(out, code(string(b)))
		}
	}
	return strings.Join(out, ", ")
}

func defaultOf(v any) string {
	if _, ok := v.(noDefault); ok {
		return "none"
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "(" + err.Error() + ")"
	}
	return code(strings.TrimSpace(b.String()))
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// valueKey is a key of values.yaml, its dotted path and the comment lines right above it.
type valueKey struct{ path, comment string }

var keyLine = regexp.MustCompile(`^( *)([A-Za-z0-9_.-]+):( .*)?$`)

// scanValues lists values.yaml's keys in order with their comments. It reads the file's
// plain shape (block mappings of two-space indents, flow values), and refuses any line it
// does not understand rather than misread it: the keys it finds are then checked against
// the schema (walk).
func scanValues(text string) ([]valueKey, error) {
	type level struct {
		indent int
		key    string
	}
	var stack []level
	var pending []string
	var out []valueKey
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			pending = nil
			continue
		case strings.HasPrefix(trimmed, "#"):
			pending = append(pending, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q is not a `key: value` line (hack/reference reads plain mappings only)", i+1, line)
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		var parts []string
		for _, l := range stack {
			parts = append(parts, l.key)
		}
		parts = append(parts, m[2])
		out = append(out, valueKey{strings.Join(parts, "."), strings.Join(pending, " ")})
		pending = nil
		if strings.TrimSpace(m[3]) == "" {
			stack = append(stack, level{indent, m[2]})
		}
	}
	return out, nil
}
