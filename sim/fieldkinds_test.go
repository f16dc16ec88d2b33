package sim

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fieldKinds are the dynamic types fmtVal formats (and appendVal, which
// falls back to it); any other panics.
var fieldKinds = map[string]bool{
	"string": true, "int": true, "int64": true, "uint64": true, "bool": true, "time.Duration": true, "time.Time": true,
}

// Every value a trace record is given in this package is of a kind fmtVal
// formats: fmtVal's switch is closed (so that rec's boxed fields never
// escape) and panics on any other kind, so a call site with a new kind
// must fail here rather than in a run. It type-checks the package's source
// and reads each field value of every rec, inject and crashFault call, of
// the send path's req helper and of the []any literals those spread.
func TestRecordFieldKinds(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source (seconds)")
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("github.com/deliverysim/deliverysim/sim", fset, files, info); err != nil {
		t.Fatal(err)
	}
	// The index of the first key of each call's key-value list.
	first := map[string]int{"rec": 2, "inject": 3, "crashFault": 4, "req": 0}
	check := func(pairs []ast.Expr, where ast.Node) {
		for i := 1; i < len(pairs); i += 2 {
			k := types.TypeString(info.Types[pairs[i]].Type, nil)
			if !fieldKinds[k] {
				t.Errorf("%s: trace field value %s is a %s; fmtVal formats only %v (add the kind there, or convert)",
					fset.Position(pairs[i].Pos()), types.ExprString(pairs[i]), k, fieldKinds)
			}
		}
	}
	calls := 0
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			name, local := "", false
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				name = fn.Sel.Name
			case *ast.Ident:
				name, local = fn.Name, true
			}
			if name == "append" && len(call.Args) > 0 {
				if lit, ok := call.Args[0].(*ast.CompositeLit); ok && types.ExprString(lit.Type) == "[]any" {
					check(lit.Elts, lit)
				}
				return true
			}
			i, ok := first[name]
			if !ok || len(call.Args) < i || (name == "req") != local {
				return true
			}
			if call.Ellipsis.IsValid() {
				return true // a spread list: its values are checked where it is built
			}
			calls++
			check(call.Args[i:], call)
			return true
		})
	}
	if calls < 50 {
		t.Fatalf("found only %d trace calls: the test no longer finds them", calls)
	}
}
