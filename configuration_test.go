package checkoutsaga

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// configurationDoc is where every environment variable is documented, in tables that each
// follow a marker naming who reads them: <!-- variables: product --> (the binary and the
// product's packages), tests (the tests, their support packages and the benchmark), deploy
// (tools/scale/run, its Temporal server config and docker-compose.yml) and opentelemetry
// (read by the OpenTelemetry libraries, never by our code).
const configurationDoc = "docs/configuration.md"

// TestConfigurationDocNamesEveryVariable reads the variable names the code reads (the binary's
// settings table, as `checkout check-config -list` prints it; every other os.Getenv and
// os.LookupEnv in the repository's Go code, through the helpers that wrap them; and the
// ${NAME:-...} and {{ env "NAME" }} of the scripts) and the names docs/configuration.md
// documents, and fails on a variable read but not documented, or documented but not read by
// the readers its table names, or a setting whose default the page misstates. So the page
// cannot drift from the code in either direction.
func TestConfigurationDocNamesEveryVariable(t *testing.T) {
	reads, unknown := goEnvReads(t, ".")
	for _, u := range unknown {
		t.Errorf("%s: cannot tell which environment variable this reads; read it by a literal name, through a helper that takes the name, or over a range of literal names", u)
	}
	binary := binarySettings(t)
	for _, s := range binary {
		reads[s.name] = append(reads[s.name], envRead{kind: "product", where: "cmd/checkout's settings"})
	}
	for _, f := range deployFiles {
		for _, name := range scriptEnvReads(t, f) {
			reads[name] = append(reads[name], envRead{kind: "deploy", where: f})
		}
	}
	documented := documentedVariables(t, configurationDoc)
	if len(reads) < 30 || len(documented) < 30 || len(binary) < 30 {
		t.Fatalf("found %d variables read (%d of them the binary's settings) and %d documented; the test reads the wrong files", len(reads), len(binary), len(documented))
	}
	for _, s := range binary {
		row, ok := documented[s.name]
		switch {
		case !ok:
			// reported below, with every other variable read
		case s.def != "" && !strings.HasPrefix(row.def, "`"+s.def+"`"):
			t.Errorf("%s documents the default of %s as %q; the binary's is %q", configurationDoc, s.name, row.def, s.def)
		case s.devDef != "" && !strings.Contains(row.def, "dev:"):
			t.Errorf("%s documents the default of %s as %q; say what checkout dev takes instead (%q)", configurationDoc, s.name, row.def, s.devDef)
		}
	}

	names := make([]string, 0, len(reads))
	for name := range reads {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		row, ok := documented[name]
		kind := row.kind
		where := reads[name][0].where
		switch {
		case !ok:
			t.Errorf("%s reads %s, which %s does not document: add it to the table of its readers", where, name, configurationDoc)
		case kind == "opentelemetry":
			t.Errorf("%s reads %s, which %s lists as read only by the OpenTelemetry libraries: move it to the product's table", where, name, configurationDoc)
		case readBy(reads[name], "product") && kind != "product":
			t.Errorf("%s reads %s, which %s documents under %q: the product reads it, so it belongs in the product's table", where, name, configurationDoc, kind)
		case readBy(reads[name], "deploy") && kind != "product" && kind != "deploy":
			t.Errorf("%s reads %s, which %s documents under %q: move it to the deploy table", where, name, configurationDoc, kind)
		}
	}
	for name, row := range documented {
		kind := row.kind
		switch {
		case kind == "opentelemetry":
			if !strings.HasPrefix(name, "OTEL_") {
				t.Errorf("%s lists %s as read by the OpenTelemetry libraries, which read only OTEL_ variables", configurationDoc, name)
			}
		case !readBy(reads[name], kind):
			t.Errorf("%s documents %s under %q, but no %s code reads it: remove it, or move it to the table of what reads it", configurationDoc, name, kind, kind)
		}
	}
}

// binarySetting is one row of the binary's settings table.
type binarySetting struct{ name, def, devDef string }

// binarySettings reads the binary's settings table from `checkout check-config -list`: an
// environment file of every variable with its default, each under a comment of its doc
// ("; checkout dev: X" when the local stack's default differs).
func binarySettings(t *testing.T) []binarySetting {
	t.Helper()
	out, err := exec.Command("go", "run", "./cmd/checkout", "check-config", "-list").Output()
	if err != nil {
		t.Fatalf("checkout check-config -list: %v", err)
	}
	var settings []binarySetting
	var devDef string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if doc, ok := strings.CutPrefix(line, "# "); ok {
			_, devDef, _ = strings.Cut(doc, "; checkout dev: ")
			continue
		}
		name, def, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("checkout check-config -list: %q is no NAME=default line", line)
		}
		settings = append(settings, binarySetting{name: name, def: def, devDef: devDef})
	}
	return settings
}

// tableReader is the one function that reads variables by names it does not spell out: the
// binary's loadConfig, over its settings table, which binarySettings reads instead.
const tableReader = "cmd/checkout.loadConfig"

// deployFiles are the scripts and configs that read variables from their environment.
var deployFiles = []string{"tools/scale/run", "tools/scale/config/scale.yaml", "docker-compose.yml"}

type envRead struct{ kind, where string }

func readBy(reads []envRead, kind string) bool {
	return slices.ContainsFunc(reads, func(r envRead) bool { return r.kind == kind })
}

// testSupportDirs are the folders whose code, tests or not, serves only tests and tools.
var testSupportDirs = []string{"bench", "e2e", "faults", "scale", "internal", "payments/stripetest", "tools"}

func envKind(path string) string {
	if strings.HasSuffix(path, "_test.go") {
		return "tests"
	}
	for _, d := range testSupportDirs {
		if strings.HasPrefix(path, d+"/") {
			return "tests"
		}
	}
	return "product"
}

// goEnvReads returns the environment variables the Go code under root reads, with where,
// and the reads whose name it cannot tell. A reader is os.Getenv, os.LookupEnv, a function
// parameter of type func(string) string whose name says env (tracing.Enabled's getenv), or
// a function or closure that passes one of its parameters to a reader (signwebhook.go's
// envOr): found package by package until no new one turns up. The binary's settings table is
// read by binarySettings instead.
func goEnvReads(t *testing.T, root string) (map[string][]envRead, []string) {
	t.Helper()
	fset := token.NewFileSet()
	packages := map[string][]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		packages[filepath.Dir(path)] = append(packages[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reads := map[string][]envRead{}
	var unknown []string
	for _, files := range packages {
		helpers := map[string]int{} // function name -> index of the parameter that is the name
		for {
			before := len(helpers)
			for _, f := range files {
				walkEnvReads(fset, f, helpers, nil, nil)
			}
			if len(helpers) == before {
				break
			}
		}
		for _, f := range files {
			walkEnvReads(fset, f, helpers, func(name string, pos token.Position) {
				reads[name] = append(reads[name], envRead{kind: envKind(filepath.ToSlash(pos.Filename)), where: pos.String()})
			}, func(fn string, pos token.Position) {
				if filepath.ToSlash(filepath.Dir(pos.Filename))+"."+fn != tableReader {
					unknown = append(unknown, pos.String())
				}
			})
		}
	}
	return reads, unknown
}

// envScope is what a reader's argument can refer to: the enclosing function's name and
// parameters, its func(string) string parameters that read the environment, and the range
// variables bound to literal strings.
type envScope struct {
	fn      string
	params  map[string]int
	getenvs map[string]bool
	ranges  map[string][]string
	outer   *envScope
}

func (s *envScope) lookupRange(name string) ([]string, bool) {
	for ; s != nil; s = s.outer {
		if v, ok := s.ranges[name]; ok {
			return v, true
		}
		if _, ok := s.params[name]; ok {
			return nil, false // a parameter shadows an outer range variable
		}
	}
	return nil, false
}

// funcName is the name of the innermost named function around the scope.
func (s *envScope) funcName() string {
	for ; s != nil; s = s.outer {
		if s.fn != "" {
			return s.fn
		}
	}
	return ""
}

func (s *envScope) isGetenv(name string) bool {
	for ; s != nil; s = s.outer {
		if s.getenvs[name] {
			return true
		}
	}
	return false
}

type envVisitor struct {
	fset     *token.FileSet
	helpers  map[string]int
	names    map[*ast.FuncLit]string
	scope    *envScope
	found    func(string, token.Position)        // nil while only helpers are looked for
	notFound func(fn string, pos token.Position) // fn: the enclosing named function
}

func walkEnvReads(fset *token.FileSet, f *ast.File, helpers map[string]int, found func(string, token.Position), notFound func(string, token.Position)) {
	names := map[*ast.FuncLit]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if a, ok := n.(*ast.AssignStmt); ok && len(a.Lhs) == len(a.Rhs) {
			for i, r := range a.Rhs {
				if lit, ok := r.(*ast.FuncLit); ok {
					if id, ok := a.Lhs[i].(*ast.Ident); ok {
						names[lit] = id.Name
					}
				}
			}
		}
		if v, ok := n.(*ast.ValueSpec); ok && len(v.Names) == len(v.Values) {
			for i, r := range v.Values {
				if lit, ok := r.(*ast.FuncLit); ok {
					names[lit] = v.Names[i].Name
				}
			}
		}
		return true
	})
	ast.Walk(&envVisitor{fset: fset, helpers: helpers, names: names, found: found, notFound: notFound}, f)
}

func (v *envVisitor) with(s *envScope) *envVisitor {
	s.outer = v.scope
	w := *v
	w.scope = s
	return &w
}

func funcScope(name string, ft *ast.FuncType) *envScope {
	s := &envScope{fn: name, params: map[string]int{}, getenvs: map[string]bool{}}
	i := 0
	for _, field := range ft.Params.List {
		getenv := isStringFunc(field.Type)
		for _, id := range field.Names {
			s.params[id.Name] = i
			if getenv && strings.Contains(strings.ToLower(id.Name), "env") {
				s.getenvs[id.Name] = true
			}
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return s
}

// isStringFunc reports whether expr is the type func(string) string.
func isStringFunc(expr ast.Expr) bool {
	ft, ok := expr.(*ast.FuncType)
	if !ok || len(ft.Params.List) != 1 || ft.Results == nil || len(ft.Results.List) != 1 {
		return false
	}
	p, r := ft.Params.List[0], ft.Results.List[0]
	return len(p.Names) <= 1 && len(r.Names) <= 1 && isIdent(p.Type, "string") && isIdent(r.Type, "string")
}

func isIdent(expr ast.Expr, name string) bool {
	id, ok := expr.(*ast.Ident)
	return ok && id.Name == name
}

func (v *envVisitor) Visit(n ast.Node) ast.Visitor {
	switch n := n.(type) {
	case *ast.FuncDecl:
		name := n.Name.Name
		if n.Recv != nil {
			name = "" // a method is no helper by name
		}
		return v.with(funcScope(name, n.Type))
	case *ast.FuncLit:
		return v.with(funcScope(v.names[n], n.Type))
	case *ast.RangeStmt:
		lit, ok := n.X.(*ast.CompositeLit)
		val, okVal := n.Value.(*ast.Ident)
		if !ok || !okVal {
			return v
		}
		var strs []string
		for _, e := range lit.Elts {
			b, ok := e.(*ast.BasicLit)
			if !ok || b.Kind != token.STRING {
				return v
			}
			s, _ := strconv.Unquote(b.Value)
			strs = append(strs, s)
		}
		return v.with(&envScope{ranges: map[string][]string{val.Name: strs}})
	case *ast.CallExpr:
		if i, ok := v.readerIndex(n.Fun); ok && i < len(n.Args) {
			v.argument(n.Args[i])
		}
	}
	return v
}

// readerIndex reports whether fun reads the environment, and which argument is the name.
func (v *envVisitor) readerIndex(fun ast.Expr) (int, bool) {
	switch f := fun.(type) {
	case *ast.SelectorExpr:
		if isIdent(f.X, "os") && (f.Sel.Name == "Getenv" || f.Sel.Name == "LookupEnv") {
			return 0, true
		}
	case *ast.Ident:
		if v.scope.isGetenv(f.Name) {
			return 0, true
		}
		i, ok := v.helpers[f.Name]
		return i, ok
	}
	return 0, false
}

func (v *envVisitor) argument(arg ast.Expr) {
	pos := v.fset.Position(arg.Pos())
	switch a := arg.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(a.Value); err == nil && a.Kind == token.STRING {
			if v.found != nil {
				v.found(s, pos)
			}
			return
		}
	case *ast.Ident:
		if strs, ok := v.scope.lookupRange(a.Name); ok {
			for _, s := range strs {
				if v.found != nil {
					v.found(s, pos)
				}
			}
			return
		}
		// The innermost function's own parameter: that function is a reader too.
		for s := v.scope; s != nil; s = s.outer {
			if s.params == nil {
				continue // a range scope
			}
			if i, ok := s.params[a.Name]; ok && s.fn != "" {
				v.helpers[s.fn] = i
				return
			}
			break
		}
	}
	if v.found != nil && v.notFound != nil {
		v.notFound(v.scope.funcName(), pos)
	}
}

var (
	shellDefault = regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*):?[-?]`)
	templateEnv  = regexp.MustCompile(`\benv "([A-Z][A-Z0-9_]*)"`)
)

// scriptEnvReads returns the variables a script or config takes from its environment:
// ${NAME:-default} and ${NAME:?message} (shell, compose) and {{ env "NAME" }} (Temporal's
// config template).
func scriptEnvReads(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, re := range []*regexp.Regexp{shellDefault, templateEnv} {
		for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s reads no variable: the patterns no longer match it", path)
	}
	return names
}

var (
	variablesMarker = regexp.MustCompile(`^<!-- variables: (product|tests|deploy|opentelemetry) -->$`)
	variableName    = regexp.MustCompile("`([A-Z][A-Z0-9_]*\\*?)`")
)

// docRow is what the page says of a variable: the kind of its table's marker, and its default
// column.
type docRow struct{ kind, def string }

// documentedVariables returns each variable named in the first column of a table after a
// variables marker, with the marker's kind and the row's default. Only the opentelemetry table
// may name a pattern (OTEL_BSP_*).
func documentedVariables(t *testing.T, path string) map[string]docRow {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	documented := map[string]docRow{}
	for i := 0; i < len(lines); i++ {
		m := variablesMarker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		kind := m[1]
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j >= len(lines) || !strings.HasPrefix(lines[j], "|") {
			t.Errorf("%s:%d: a variables marker without a table after it", path, i+1)
			continue
		}
		for k := j + 2; k < len(lines) && strings.HasPrefix(lines[k], "|"); k++ { // past the header and its rule
			cells := strings.Split(lines[k], "|")
			found := variableName.FindAllStringSubmatch(cells[1], -1)
			if len(found) == 0 {
				t.Errorf("%s:%d: a row of the %s table names no variable in its first column", path, k+1, kind)
			}
			for _, f := range found {
				name := f[1]
				if strings.HasSuffix(name, "*") && kind != "opentelemetry" {
					t.Errorf("%s:%d: %s is a pattern; name each variable the code reads", path, k+1, name)
				}
				if prev, ok := documented[name]; ok {
					t.Errorf("%s:%d: %s is documented twice (%s and %s): keep one row", path, k+1, name, prev.kind, kind)
				}
				documented[name] = docRow{kind: kind, def: strings.TrimSpace(cells[2])}
			}
			i = k
		}
	}
	return documented
}
