package machinetest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Source is the parsed non-test files of one package directory.
type Source struct{ files []*ast.File }

// Parse reads the package in dir.
func Parse(t testing.TB, dir string) Source {
	t.Helper()
	fset := token.NewFileSet()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var src Source
	for _, de := range des {
		if n := de.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			src.files = append(src.files, f)
		}
	}
	if len(src.files) == 0 {
		t.Fatalf("no package source in %s", dir)
	}
	return src
}

// MethodTypes names the receiver types of every method called name,
// sorted.
func (p Source) MethodTypes(name string) []string {
	var out []string
	for _, f := range p.files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == name && fd.Recv != nil {
				if id, ok := fd.Recv.List[0].Type.(*ast.Ident); ok {
					out = append(out, id.Name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// CaseTypes names the types of every type switch case in function fn
// (a qualified type by its name alone: machine.Append is Append).
func (p Source) CaseTypes(fn string) []string {
	var out []string
	for _, f := range p.files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != fn || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if cc, ok := n.(*ast.CaseClause); ok {
					for _, e := range cc.List {
						switch e := e.(type) {
						case *ast.Ident:
							out = append(out, e.Name)
						case *ast.SelectorExpr:
							out = append(out, e.Sel.Name)
						}
					}
				}
				return true
			})
		}
	}
	return out
}
