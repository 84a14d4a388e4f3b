package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fileImports are the imports through which a package reaches files (or
// the process), forbidden to the core's non-test code: it reads what its
// caller hands it (an fs.FS, an io.Reader, bytes), never a path.
var fileImports = map[string]bool{
	"os": true, "io/ioutil": true, "os/exec": true, "os/signal": true, "syscall": true, "embed": true,
}

// fileCalls are the functions of otherwise pure packages that touch the
// file system.
var fileCalls = map[string]bool{
	"filepath.Walk": true, "filepath.WalkDir": true, "filepath.Glob": true,
	"filepath.EvalSymlinks": true, "filepath.Abs": true,
}

// fileAccess returns the file access in one Go source file: forbidden
// imports and calls, as "file:line: what".
func fileAccess(fset *token.FileSet, f *ast.File) []string {
	var out []string
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if fileImports[p] {
			out = append(out, fset.Position(im.Pos()).String()+": imports "+p)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && fileCalls[id.Name+"."+sel.Sel.Name] {
			out = append(out, fset.Position(sel.Pos()).String()+": uses "+id.Name+"."+sel.Sel.Name)
		}
		return true
	})
	return out
}

// TestCoreReadsNoFiles: the core's non-test files neither import the
// packages that open files nor call the path functions that read the file
// system (go list -deps cannot tell: almost every package depends on os).
func TestCoreReadsNoFiles(t *testing.T) {
	for _, pkg := range core {
		dir := filepath.Join("..", pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, bad := range fileAccess(fset, f) {
				t.Errorf("core package %s reads files: %s", pkg, bad)
			}
		}
	}
}

// The check finds what it must (so that the test above can fail).
func TestFileAccessIsFound(t *testing.T) {
	src := `package x
import ("os"; "path/filepath")
func f() { os.ReadFile("a"); filepath.Glob("*") }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := fileAccess(fset, f)
	if len(got) != 2 || !strings.Contains(got[0], "imports os") || !strings.Contains(got[1], "uses filepath.Glob") {
		t.Errorf("fileAccess = %q, want the os import and the Glob call", got)
	}
}
