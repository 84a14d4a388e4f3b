package rules

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Limits for non-test Go code.
const (
	maxFuncLines = 80
	maxFileLines = 600
)

// core lists the pure packages (as internal/layout does): routing decisions,
// routing state, the replica model, traffic, the simulator, the shapes they
// share and the strict decoder.
var core = []string{
	"internal/ring", "internal/policy", "internal/state", "internal/prefix", "internal/replicaset",
	"internal/model", "internal/traffic", "internal/sim", "internal/wire", "internal/strict", "internal/admission",
}

// coreForbidden are the imports a core package's non-test file may not
// have: networking, and the packages through which code reaches files or
// the process. (internal/layout checks the core's transitive dependencies
// with go list; this check sees the files themselves.)
var coreForbidden = map[string]bool{
	"net": true, "net/http": true, "net/http/httputil": true,
	"os": true, "io/ioutil": true, "os/exec": true, "os/signal": true, "syscall": true, "embed": true,
}

// fileCalls are functions of otherwise pure packages that touch the file
// system.
var fileCalls = map[string]bool{
	"filepath.Walk": true, "filepath.WalkDir": true, "filepath.Glob": true,
	"filepath.EvalSymlinks": true, "filepath.Abs": true,
}

// An offence is a function or a file over its limit: "path func=lines" or
// "path lines" as the lists below write them.
type offence struct {
	path, fn string // fn "" for a file
	lines    int
}

func (o offence) key() string { return strings.TrimSpace(o.path + " " + o.fn) }

// scan parses every non-test Go file under root and returns the functions
// and files over their limits, and the core's forbidden imports and calls.
func scan(t *testing.T, root string) (over []offence, impure []string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		o, im, err := checkFile(path, rel)
		over, impure = append(over, o...), append(impure, im...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return over, impure
}

// checkFile returns one file's offences; rel is its path as reported.
func checkFile(path, rel string) ([]offence, []string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, nil, err
	}
	var over []offence
	if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
		over = append(over, offence{rel, "", n})
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
			over = append(over, offence{rel, funcName(fd), n})
		}
	}
	var impure []string
	if isCore(rel) {
		impure = coreAccess(fset, f, rel)
	}
	return over, impure, nil
}

// funcName is "Name" or "Recv.Name" for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
			continue
		case *ast.IndexExpr:
			typ = x.X
			continue
		case *ast.IndexListExpr:
			typ = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

func isCore(rel string) bool {
	for _, c := range core {
		if filepath.ToSlash(filepath.Dir(rel)) == c {
			return true
		}
	}
	return false
}

// coreAccess returns a core file's forbidden imports and file calls.
func coreAccess(fset *token.FileSet, f *ast.File, rel string) []string {
	var out []string
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if coreForbidden[p] {
			out = append(out, fmt.Sprintf("%s:%d: imports %s", rel, fset.Position(im.Pos()).Line, p))
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && fileCalls[id.Name+"."+sel.Sel.Name] {
			out = append(out, fmt.Sprintf("%s:%d: uses %s.%s", rel, fset.Position(sel.Pos()).Line, id.Name, sel.Sel.Name))
		}
		return true
	})
	return out
}

// parseAllowed reads the offender list: "path lines" for a file, "path
// func lines" for a function.
func parseAllowed(t *testing.T, list string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, line := range strings.Split(list, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		var o offence
		switch len(f) {
		case 2:
			o.path = f[0]
		case 3:
			o.path, o.fn = f[0], f[1]
		default:
			t.Fatalf("offender list: bad line %q", line)
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			t.Fatalf("offender list: bad line %q", line)
		}
		if _, dup := out[o.key()]; dup {
			t.Fatalf("offender list: %q listed twice", o.key())
		}
		out[o.key()] = n
	}
	return out
}

// compare checks the offences found against the allowed list: a new one, or
// one grown past its entry, is an error; so is an entry that no longer
// offends or has shrunk (the list must be brought down with the code).
func compare(found []offence, allowed map[string]int) []string {
	var errs []string
	seen := map[string]bool{}
	for _, o := range found {
		k := o.key()
		seen[k] = true
		n, ok := allowed[k]
		switch {
		case !ok && o.fn == "":
			errs = append(errs, fmt.Sprintf("%s: %d lines, over %d (split the file)", o.path, o.lines, maxFileLines))
		case !ok:
			errs = append(errs, fmt.Sprintf("%s: func %s: %d lines, over %d (split the function)", o.path, o.fn, o.lines, maxFuncLines))
		case o.lines > n:
			errs = append(errs, fmt.Sprintf("%s: grew from %d to %d lines (listed offenders may only shrink)", k, n, o.lines))
		case o.lines < n:
			errs = append(errs, fmt.Sprintf("%s: shrank from %d to %d lines: lower its entry in offenders_test.go", k, n, o.lines))
		}
	}
	for k := range allowed {
		if !seen[k] {
			errs = append(errs, fmt.Sprintf("%s: no longer over the limit: remove its entry from offenders_test.go", k))
		}
	}
	sort.Strings(errs)
	return errs
}

func TestRepositoryRules(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	over, impure := scan(t, root)
	for _, e := range compare(over, parseAllowed(t, offenders)) {
		t.Error(e)
	}
	for _, e := range impure {
		t.Errorf("core package reaches files or the network: %s", e)
	}
}

// The checks find what they must, so that the test above can fail.
func TestRulesFindOffences(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("package x\n\nimport (\n\t\"net/http\"\n\t\"os\"\n\t\"path/filepath\"\n)\n\nfunc long() {\n")
	for range maxFuncLines {
		b.WriteString("\t_ = 1\n")
	}
	b.WriteString("}\n\nfunc (*T) m() { os.ReadFile(\"a\"); filepath.Glob(\"*\"); _ = http.StatusOK }\n\ntype T struct{}\n")
	path := filepath.Join(dir, "x.go")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	over, impure, err := checkFile(path, "internal/sim/x.go")
	if err != nil {
		t.Fatal(err)
	}
	if len(over) != 1 || over[0].fn != "long" || over[0].lines != maxFuncLines+2 {
		t.Errorf("offences %+v, want long at %d lines", over, maxFuncLines+2)
	}
	if len(impure) != 3 || !strings.Contains(impure[0], "imports net/http") || !strings.Contains(impure[2], "uses filepath.Glob") {
		t.Errorf("core access %q, want net/http, os and the Glob call", impure)
	}
	errs := compare([]offence{{"a.go", "f", 90}, {"b.go", "", 700}, {"c.go", "g", 85}},
		map[string]int{"c.go g": 82, "d.go h": 99})
	want := []string{
		"a.go: func f: 90 lines, over 80 (split the function)",
		"b.go: 700 lines, over 600 (split the file)",
		"c.go g: grew from 82 to 85 lines (listed offenders may only shrink)",
		"d.go h: no longer over the limit: remove its entry from offenders_test.go",
	}
	if strings.Join(errs, "\n") != strings.Join(want, "\n") {
		t.Errorf("compare:\n%s\nwant:\n%s", strings.Join(errs, "\n"), strings.Join(want, "\n"))
	}
}
