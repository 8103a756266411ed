package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docs/troubleshooting.md is organised by what a user sees; its table "Event reasons" must
// name every reason an Event of the driver can carry, and nothing else. The reasons are read
// from the source, not from a list kept by hand: every call of an event recorder (eventFuncs)
// and every Event literal in the product code (pkg/, cmd/, non-test files), with its reason
// resolved to a string through literals, constants of any package of the module and local
// variables; and the same in the provisioning library the controller runs
// (eventLibraries), which records the claims' Events for it.

const troubleshootingDoc = "docs/troubleshooting.md"

// eventFuncs are the functions that record an Event, by name, with the positions of their
// event type and reason arguments. A call of one whose reason is a parameter of the function
// it is in is a wrapper (its callers are read instead); that function must be one of these
// too, so that a new wrapper cannot hide its callers' reasons.
var eventFuncs = map[string]struct{ typ, reason int }{
	"Event":           {1, 2}, // record.EventRecorder: Event(object, eventtype, reason, message)
	"Eventf":          {1, 2}, // Eventf(object, eventtype, reason, messageFmt, args...)
	"AnnotatedEventf": {2, 3}, // AnnotatedEventf(object, annotations, eventtype, reason, messageFmt, args...)
	"PodEvent":        {1, 2}, // csidriver.EventSink: PodEvent(pod, warning, reason, message)
	"event":           {1, 2}, // the node plugin's own: event(pod, warning, reason, message)
	"PodEventTo":      {2, 3}, // nodevolume.PodEventTo(sink, pod, warning, reason, message)
}

// eventLibraries are the packages outside the module that record Events for the driver: the
// provisioning library's controller (cmd/gcsfuse-csi-controller), on claims and volumes.
var eventLibraries = []string{"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"}

// eventLibraryPattern matches any version of those libraries: an import of another one means
// eventLibraries is out of date.
var eventLibraryPattern = regexp.MustCompile(`^sigs\.k8s\.io/sig-storage-lib-external-provisioner(/v[0-9]+)?/controller$`)

// At least this many reasons must be found, or the collector reads the wrong thing.
const (
	minDriverReasons  = 5
	minLibraryReasons = 3
)

// goSource is one parsed Go file and what its names mean.
type goSource struct {
	pos     string // how messages name it
	pkg     string // its directory: constants are looked up per directory
	file    *ast.File
	imports map[string]string // local name -> import path
}

// eventReason is one reason and where it is recorded.
type eventReason struct {
	types map[string]bool // Normal, Warning
	where []string
}

type reasonCollector struct {
	top    string
	fset   *token.FileSet
	consts map[string]map[string]constDef // package directory -> name -> definition
	parsed map[string][]*goSource         // package directory -> files
	found  map[string]*eventReason
	errs   []string
}

type constDef struct {
	expr ast.Expr
	in   *goSource
}

func newReasonCollector(top string) *reasonCollector {
	return &reasonCollector{top: top, fset: token.NewFileSet(), consts: map[string]map[string]constDef{},
		parsed: map[string][]*goSource{}, found: map[string]*eventReason{}}
}

// parseDir parses the non-test Go files of one directory; name says how messages show it.
func (c *reasonCollector) parseDir(t *testing.T, dir, name string) []*goSource {
	t.Helper()
	if files, ok := c.parsed[dir]; ok {
		return files
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*goSource
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := parser.ParseFile(c.fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		src := &goSource{pos: name + "/" + e.Name(), pkg: dir, file: f, imports: map[string]string{}}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			local := filepath.Base(p)
			if imp.Name != nil {
				local = imp.Name.Name
			}
			src.imports[local] = p
		}
		if c.consts[dir] == nil {
			c.consts[dir] = map[string]constDef{}
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if len(vs.Values) != len(vs.Names) {
					continue // iota and implicit repetitions: never a string
				}
				for i, n := range vs.Names {
					c.consts[dir][n.Name] = constDef{expr: vs.Values[i], in: src}
				}
			}
		}
		out = append(out, src)
	}
	c.parsed[dir] = out
	return out
}

// where names a position for messages, relative to the file's own name.
func (c *reasonCollector) where(src *goSource, p token.Pos) string {
	return fmt.Sprintf("%s:%d", src.pos, c.fset.Position(p).Line)
}

// collect reads the Events the files record.
func (c *reasonCollector) collect(t *testing.T, files []*goSource) {
	t.Helper()
	for _, src := range files {
		for _, d := range src.file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					c.call(src, fn, n)
				case *ast.CompositeLit:
					c.literal(src, fn, n)
				}
				return true
			})
		}
	}
}

func calledName(call *ast.CallExpr) string {
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// call reads one call of an event recorder.
func (c *reasonCollector) call(src *goSource, fn *ast.FuncDecl, call *ast.CallExpr) {
	name := calledName(call)
	at, ok := eventFuncs[name]
	if !ok || len(call.Args) < at.reason+2 { // an event call has a message after the reason
		return
	}
	reasonArg := call.Args[at.reason]
	if id, ok := reasonArg.(*ast.Ident); ok && isParam(fn, id.Name) {
		if _, known := eventFuncs[fn.Name.Name]; !known {
			c.errs = append(c.errs, fmt.Sprintf("%s: %s passes its parameter %s as an Event's reason: add %s to eventFuncs so that its callers are read",
				c.where(src, call.Pos()), fn.Name.Name, id.Name, fn.Name.Name))
		}
		return // a wrapper: its callers are read
	}
	c.record(src, fn, call.Pos(), reasonArg, call.Args[at.typ])
}

// literal reads an Event built by hand (corev1.Event{Reason: ...}).
func (c *reasonCollector) literal(src *goSource, fn *ast.FuncDecl, lit *ast.CompositeLit) {
	typeName := ""
	switch t := lit.Type.(type) {
	case *ast.Ident:
		typeName = t.Name
	case *ast.SelectorExpr:
		typeName = t.Sel.Name
	}
	if typeName != "Event" {
		return
	}
	var reason, typ ast.Expr
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		switch k, _ := kv.Key.(*ast.Ident); {
		case k == nil:
		case k.Name == "Reason":
			reason = kv.Value
		case k.Name == "Type":
			typ = kv.Value
		}
	}
	if reason == nil {
		return // another type named Event
	}
	if typ == nil {
		typ = &ast.BadExpr{From: lit.Pos(), To: lit.End()}
	}
	c.record(src, fn, lit.Pos(), reason, typ)
}

func (c *reasonCollector) record(src *goSource, fn *ast.FuncDecl, pos token.Pos, reasonArg, typArg ast.Expr) {
	where := c.where(src, pos)
	reasons, err := c.stringValues(src, fn, reasonArg, 0)
	if err != nil {
		c.errs = append(c.errs, fmt.Sprintf("%s: cannot resolve the Event's reason: %v", where, err))
		return
	}
	typ, err := eventType(typArg)
	if err != nil {
		c.errs = append(c.errs, fmt.Sprintf("%s: cannot tell the Event's type: %v", where, err))
		return
	}
	for _, r := range reasons {
		e := c.found[r]
		if e == nil {
			e = &eventReason{types: map[string]bool{}}
			c.found[r] = e
		}
		e.types[typ] = true
		e.where = append(e.where, where)
	}
}

// eventType reads an event type argument: the recorder's corev1.EventType* or a warning flag.
func eventType(e ast.Expr) (string, error) {
	switch e := e.(type) {
	case *ast.Ident:
		switch e.Name {
		case "true":
			return "Warning", nil
		case "false":
			return "Normal", nil
		}
	case *ast.SelectorExpr:
		switch e.Sel.Name {
		case "EventTypeWarning":
			return "Warning", nil
		case "EventTypeNormal":
			return "Normal", nil
		}
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil && (s == "Normal" || s == "Warning") {
			return s, nil
		}
	}
	return "", fmt.Errorf("%T is neither true, false nor an EventType constant", e)
}

func isParam(fn *ast.FuncDecl, name string) bool {
	for _, f := range fn.Type.Params.List {
		for _, n := range f.Names {
			if n.Name == name {
				return true
			}
		}
	}
	return false
}

// stringValues resolves a string expression to the values it can take: a literal, a constant of
// the file's package or of a package of the module, or a local variable of fn (every value
// assigned to it).
func (c *reasonCollector) stringValues(src *goSource, fn *ast.FuncDecl, e ast.Expr, depth int) ([]string, error) {
	if depth > 8 {
		return nil, fmt.Errorf("too deep")
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return nil, fmt.Errorf("literal %s is not a string", e.Value)
		}
		s, err := strconv.Unquote(e.Value)
		return []string{s}, err
	case *ast.ParenExpr:
		return c.stringValues(src, fn, e.X, depth+1)
	case *ast.Ident:
		if fn != nil && isParam(fn, e.Name) {
			return nil, fmt.Errorf("%s is a parameter of %s", e.Name, fn.Name.Name)
		}
		if fn != nil {
			if values := assigned(fn, e.Name); len(values) > 0 {
				var out []string
				for _, v := range values {
					s, err := c.stringValues(src, fn, v, depth+1)
					if err != nil {
						return nil, err
					}
					out = append(out, s...)
				}
				return out, nil
			}
		}
		if d, ok := c.consts[src.pkg][e.Name]; ok {
			return c.stringValues(d.in, nil, d.expr, depth+1)
		}
		return nil, fmt.Errorf("%s is neither a local variable nor a constant of its package", e.Name)
	case *ast.SelectorExpr:
		pkg, ok := e.X.(*ast.Ident)
		if !ok {
			return nil, fmt.Errorf("%T.%s is not a package's constant", e.X, e.Sel.Name)
		}
		path, ok := src.imports[pkg.Name]
		if !ok || !strings.HasPrefix(path, module+"/") {
			return nil, fmt.Errorf("%s.%s is not a constant of this module", pkg.Name, e.Sel.Name)
		}
		dir := filepath.Join(c.top, filepath.FromSlash(strings.TrimPrefix(path, module+"/")))
		if _, ok := c.consts[dir]; !ok {
			return nil, fmt.Errorf("package %s was not parsed", path)
		}
		d, ok := c.consts[dir][e.Sel.Name]
		if !ok {
			return nil, fmt.Errorf("%s.%s is not a constant", pkg.Name, e.Sel.Name)
		}
		return c.stringValues(d.in, nil, d.expr, depth+1)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			break
		}
		l, err := c.stringValues(src, fn, e.X, depth+1)
		if err != nil {
			return nil, err
		}
		r, err := c.stringValues(src, fn, e.Y, depth+1)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, a := range l {
			for _, b := range r {
				out = append(out, a+b)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%T is not a string constant, literal or local variable", e)
}

// assigned returns every value fn assigns to the local name (name := v, name = v, var name = v).
func assigned(fn *ast.FuncDecl, name string) []ast.Expr {
	var out []ast.Expr
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Lhs) != len(n.Rhs) {
				break
			}
			for i, l := range n.Lhs {
				if id, ok := l.(*ast.Ident); ok && id.Name == name {
					out = append(out, n.Rhs[i])
				}
			}
		case *ast.ValueSpec:
			if len(n.Values) != len(n.Names) {
				break
			}
			for i, id := range n.Names {
				if id.Name == name {
					out = append(out, n.Values[i])
				}
			}
		}
		return true
	})
	return out
}

// productSources parses every package directory under pkg/ and cmd/.
func (c *reasonCollector) productSources(t *testing.T) []*goSource {
	t.Helper()
	var all []*goSource
	for _, top := range []string{"pkg", "cmd"} {
		err := filepath.WalkDir(filepath.Join(c.top, top), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				return nil
			}
			if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			rel, _ := filepath.Rel(c.top, path)
			all = append(all, c.parseDir(t, path, filepath.ToSlash(rel))...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// documentedReason is one row of the doc's table.
type documentedReason struct {
	typ  string
	line int
}

// readReasonTable reads the table of the section "## Event reasons": a row per reason, the
// reason in backticks in the first cell, its type in the second, and a link to a section of
// the same document in the last.
func readReasonTable(t *testing.T, doc string) map[string]documentedReason {
	t.Helper()
	anchors := headingAnchors(doc)
	rowReason := regexp.MustCompile("^`([A-Za-z][A-Za-z0-9]*)`$")
	link := regexp.MustCompile(`\]\(#([^)]+)\)`)
	out := map[string]documentedReason{}
	in, header := false, false
	for i, line := range strings.Split(doc, "\n") {
		n := i + 1
		if strings.HasPrefix(line, "#") {
			if in {
				break
			}
			in = strings.TrimSpace(line) == "## Event reasons"
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		if !header { // the header row, then the delimiter row
			header = true
			continue
		}
		if strings.Trim(line, "|-: ") == "" {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		m := rowReason.FindStringSubmatch(cells[0])
		if m == nil || len(cells) < 3 {
			t.Errorf("%s:%d: a row of the Event reasons table must start with a reason in backticks, its type next: %q", troubleshootingDoc, n, line)
			continue
		}
		if prev, dup := out[m[1]]; dup {
			t.Errorf("%s:%d: %s has a row already, at line %d", troubleshootingDoc, n, m[1], prev.line)
		}
		out[m[1]] = documentedReason{typ: cells[1], line: n}
		links := link.FindAllStringSubmatch(cells[len(cells)-1], -1)
		if len(links) == 0 {
			t.Errorf("%s:%d: %s: the last cell must link to the section that explains it", troubleshootingDoc, n, m[1])
		}
		for _, l := range links {
			if !anchors[l[1]] {
				t.Errorf("%s:%d: %s links to #%s, which is no heading of the document", troubleshootingDoc, n, m[1], l[1])
			}
		}
	}
	if !in && len(out) == 0 {
		t.Fatalf("%s has no section \"## Event reasons\"", troubleshootingDoc)
	}
	return out
}

// headingAnchors are the anchors GitHub gives the document's headings: lower case, spaces
// to hyphens, punctuation but - and _ dropped, a repeated one suffixed -1, -2...
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sortedTypes(types map[string]bool) string {
	var out []string
	for k := range types {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// Every Event reason the driver's code, or the provisioning library it runs, can record has a
// row in docs/troubleshooting.md's table, with its type; and every row names a reason that is
// still recorded.
func TestTroubleshootingCoversEveryEventReason(t *testing.T) {
	top := root(t)
	c := newReasonCollector(top)

	c.collect(t, c.productSources(t))
	driver := len(c.found)
	if driver < minDriverReasons {
		t.Fatalf("found %d Event reasons in pkg/ and cmd/, want at least %d: the collector is looking at the wrong thing (eventFuncs?)", driver, minDriverReasons)
	}

	// The libraries that record Events for the driver: the ones it imports, and no other
	// version of them.
	imported := map[string]bool{}
	for _, files := range c.parsed {
		for _, src := range files {
			for _, p := range src.imports {
				if eventLibraryPattern.MatchString(p) {
					imported[p] = true
				}
			}
		}
	}
	for p := range imported {
		if !slices.Contains(eventLibraries, p) {
			t.Errorf("product code imports %s, which records Events for the driver: put it in eventLibraries (in place of the version it replaces)", p)
		}
	}
	for _, lib := range eventLibraries {
		if !imported[lib] {
			t.Errorf("eventLibraries names %s, which no product code imports any more", lib)
			continue
		}
		before := len(c.found)
		for _, p := range goList(t, lib) {
			c.collect(t, c.parseDir(t, p.Dir, p.ImportPath))
		}
		if n := len(c.found) - before; n < minLibraryReasons {
			t.Errorf("found %d Event reasons in %s, want at least %d: the collector is looking at the wrong thing", n, lib, minLibraryReasons)
		}
	}
	for _, e := range c.errs {
		t.Error(e)
	}

	documented := readReasonTable(t, readDoc(t, troubleshootingDoc))
	var names []string
	for r := range c.found {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		e := c.found[r]
		d, ok := documented[r]
		switch {
		case !ok:
			t.Errorf("Event reason %s (recorded at %s) has no row in the Event reasons table of %s", r, strings.Join(e.where, ", "), troubleshootingDoc)
		case d.typ != sortedTypes(e.types):
			t.Errorf("%s:%d: %s is documented as %q; the code records it as %q (%s)", troubleshootingDoc, d.line, r, d.typ, sortedTypes(e.types), strings.Join(e.where, ", "))
		}
	}
	var stale []string
	for r := range documented {
		if c.found[r] == nil {
			stale = append(stale, r)
		}
	}
	sort.Strings(stale)
	for _, r := range stale {
		t.Errorf("%s:%d: documents Event reason %s, which no code records any more", troubleshootingDoc, documented[r].line, r)
	}
	for _, r := range names {
		t.Logf("%s (%s): %s", r, sortedTypes(c.found[r].types), strings.Join(c.found[r].where, ", "))
	}
}

// nodeServicePackages answer the kubelet's Node calls: the service and its mounters.
var nodeServicePackages = []string{"pkg/csidriver", "pkg/nodevolume", "pkg/sidecarmounter", "pkg/sharedmounter"}

// Every gRPC code the node service answers the kubelet with (nodeServicePackages) is named
// in docs/troubleshooting.md, where the FailedMount messages are explained.
func TestTroubleshootingNamesEveryNodeErrorCode(t *testing.T) {
	c := newReasonCollector(root(t))
	found := map[string]string{}
	var srcs []*goSource
	for _, pkg := range nodeServicePackages {
		srcs = append(srcs, c.parseDir(t, filepath.Join(root(t), filepath.FromSlash(pkg)), pkg)...)
	}
	for _, src := range srcs {
		local := ""
		for name, p := range src.imports {
			if p == "google.golang.org/grpc/codes" {
				local = name
			}
		}
		if local == "" {
			continue
		}
		ast.Inspect(src.file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && unicode.IsUpper(rune(sel.Sel.Name[0])) {
				if _, seen := found[sel.Sel.Name]; !seen {
					found[sel.Sel.Name] = c.where(src, sel.Pos())
				}
			}
			return true
		})
	}
	if len(found) < 4 {
		t.Fatalf("found %d gRPC codes in %v, want at least 4: the check is looking at the wrong thing", len(found), nodeServicePackages)
	}
	doc := readDoc(t, troubleshootingDoc)
	for code, where := range found {
		if !strings.Contains(doc, "`"+code+"`") {
			t.Errorf("the node service answers with code %s (%s), which %s does not name (in backticks)", code, where, troubleshootingDoc)
		}
	}
}

// Every message of the chart's ValidatingAdmissionPolicy is quoted in full in
// docs/troubleshooting.md (whitespace aside), so that a user can find the one kubectl shows.
func TestTroubleshootingQuotesThePolicyMessages(t *testing.T) {
	const policy = "deploy/chart/gcsfuse-csi/templates/webhook/validating-policy.yaml"
	lines := strings.Split(readDoc(t, policy), "\n")
	folded := regexp.MustCompile(`^(\s*)message:\s*[>|]-?\s*$`)
	inline := regexp.MustCompile(`^\s*message:\s*(\S.*)$`)
	var messages []string
	for i := 0; i < len(lines); i++ {
		if m := folded.FindStringSubmatch(lines[i]); m != nil {
			var parts []string
			for i+1 < len(lines) && len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > len(m[1]) {
				i++
				parts = append(parts, strings.TrimSpace(lines[i]))
			}
			messages = append(messages, strings.Join(parts, " "))
		} else if m := inline.FindStringSubmatch(lines[i]); m != nil {
			messages = append(messages, strings.Trim(m[1], `"'`))
		}
	}
	if len(messages) < 3 {
		t.Fatalf("found %d messages in %s, want at least 3: the check is looking at the wrong thing", len(messages), policy)
	}
	doc := strings.Join(strings.Fields(readDoc(t, troubleshootingDoc)), " ")
	for _, m := range messages {
		if m = strings.Join(strings.Fields(m), " "); !strings.Contains(doc, m) {
			t.Errorf("%s does not quote the policy's message %q", troubleshootingDoc, m)
		}
	}
}
