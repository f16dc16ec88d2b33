package mutate

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Operator names. They are part of every mutant id and of the survivors
// file, so they never change meaning.
const (
	OpBoundary     = "conditionals-boundary" // < <=, > >= (both ways)
	OpNegation     = "conditionals-negation" // == !=, < >=, <= >, > <=, >= <
	OpArithmetic   = "arithmetic"            // + -, * /, % *, += -=
	OpIncrement    = "increment"             // ++ --
	OpLogical      = "invert-logical"        // && ||
	OpBoolFlip     = "boolean-flip"          // true false, !x x
	OpDeleteStmt   = "delete-statement"      // an expression statement, assignment or ++/-- removed
	OpSwapWrites   = "swap-store-writes"     // two consecutive statements that write the store, swapped
	OpDropErrCheck = "drop-error-check"      // if err != nil { ... } never taken
)

// Operators lists every operator in a fixed order.
func Operators() []string {
	return []string{OpBoundary, OpNegation, OpArithmetic, OpIncrement, OpLogical,
		OpBoolFlip, OpDeleteStmt, OpSwapWrites, OpDropErrCheck}
}

// Mutant is one small change to one source file. ID is file:line:col:operator
// (file relative to the module root), stable as long as the file's text
// before the site is. Func and Snippet locate it again when lines move (the
// survivors file matches on them too).
type Mutant struct {
	ID       string `json:"id"`
	Package  string `json:"package"` // module-relative directory, e.g. impl/engine
	File     string `json:"file"`    // module-relative path
	Line     int    `json:"line"`
	Col      int    `json:"col"`
	Operator string `json:"operator"`
	Func     string `json:"func"`    // enclosing function or method, e.g. (*Engine).pump
	Snippet  string `json:"snippet"` // the original text at the site, one line, shortened
	Change   string `json:"change"`  // what the mutant does, e.g. "< -> <="

	edits []edit
	wraps []wrap // the same change as guarded code, for the schemata build
	// Invalid is the type error that makes the mutant not compile; such a
	// mutant is reported as invalid, not run.
	Invalid string `json:"invalid,omitempty"`
	// unguardable says why the change cannot be guarded in a schemata
	// build (it is then built on its own); "" if it can.
	unguardable string
}

// edit replaces src[off:end] with text.
type edit struct {
	off, end int
	text     string
}

// Apply returns src with the mutant's change made. src must be the file the
// mutant was generated from.
func (m Mutant) Apply(src []byte) []byte {
	es := append([]edit(nil), m.edits...)
	sort.Slice(es, func(i, j int) bool { return es[i].off > es[j].off })
	out := append([]byte(nil), src...)
	for _, e := range es {
		out = append(out[:e.off:e.off], append([]byte(e.text), out[e.end:]...)...)
	}
	return out
}

// GenerateOptions says where to look.
type GenerateOptions struct {
	Root string // module root (the directory holding go.mod)
	Pkg  string // package directory relative to Root, e.g. impl/engine
}

// Generate lists every mutant of the package's non-test Go files, in file
// then position order. Code that only runs with a known-bug switch on (the
// body of an `if ....Bugs.X` branch) is not the reference engine's and is
// left alone.
func Generate(opts GenerateOptions) ([]Mutant, error) {
	dir := filepath.Join(opts.Root, filepath.FromSlash(opts.Pkg))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("package %s: %w", opts.Pkg, err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	var names []string
	srcs := map[string][]byte{}
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, n, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s/%s: %w", opts.Pkg, n, err)
		}
		files = append(files, f)
		names = append(names, n)
		srcs[n] = src
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("package %s has no Go source files", opts.Pkg)
	}
	imp, err := exportImporter(fset, opts.Root, opts.Pkg)
	if err != nil {
		return nil, err
	}
	conf := types.Config{Importer: imp, Error: func(error) {}}
	info := typeInfo(conf, fset, files)
	modPath, err := modulePath(opts.Root)
	if err != nil {
		return nil, err
	}
	bugOnly := bugOnlyFuncs(files)
	var out []Mutant
	for i, f := range files {
		g := &gen{fset: fset, info: info, src: srcs[names[i]], file: names[i], opts: opts,
			modPath: modPath, pkgName: f.Name.Name, bugOnly: bugOnly}
		g.walkFile(f)
		out = append(out, g.out...)
	}
	if info != nil {
		// A mutant that does not type-check is invalid: reported, never
		// built or run (it is not a kill).
		for i := range out {
			m := &out[i]
			fi := indexOf(names, strings.TrimPrefix(m.File, opts.Pkg+"/"))
			mf, err := parser.ParseFile(fset, names[fi], m.Apply(srcs[names[fi]]), parser.SkipObjectResolution)
			if err != nil {
				m.Invalid = oneLine(err.Error())
				continue
			}
			set := append([]*ast.File(nil), files...)
			set[fi] = mf
			var first error
			c := conf
			c.Error = func(err error) {
				if first == nil {
					first = err
				}
			}
			_, _ = c.Check(files[0].Name.Name, fset, set, nil)
			if first != nil {
				m.Invalid = oneLine(first.Error())
			}
		}
	}
	seen := map[string]int{}
	for i := range out {
		seen[out[i].ID]++
		if n := seen[out[i].ID]; n > 1 {
			out[i].ID += fmt.Sprintf("#%d", n)
		}
	}
	return out, nil
}

// exportImporter imports the package's dependencies from the compiler's
// export data, which `go list -export` builds (or finds in the build
// cache): type-checking hundreds of mutated copies then costs milliseconds
// each.
func exportImporter(fset *token.FileSet, root, pkg string) (types.Importer, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", "./"+pkg)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export ./%s: %v: %s", pkg, err, oneLine(stderr.String()))
	}
	exports := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if path, file, ok := strings.Cut(l, "="); ok && file != "" {
			exports[path] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	}), nil
}

// modulePath reads the module path from Root/go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("reading the module root: %w (run from the module root or pass its path)", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s/go.mod has no module line", root)
}

// typeInfo type-checks the package from source so that string + and
// friends are not mutated into code that cannot compile. If checking fails
// (an unusual build set-up), every site is still generated and the ones
// that do not compile are reported as invalid.
func typeInfo(conf types.Config, fset *token.FileSet, files []*ast.File) *types.Info {
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	if _, err := conf.Check(files[0].Name.Name, fset, files, info); err != nil && len(info.Types) == 0 {
		return nil
	}
	return info
}

type gen struct {
	fset *token.FileSet
	info *types.Info
	src  []byte
	file string
	opts GenerateOptions

	modPath, pkgName string
	bugOnly          map[string]bool // names of functions only a known-bug variant runs

	fn   string // enclosing function
	recv string // the enclosing method's receiver name
	out  []Mutant

	// posts are the for clauses' post statements: only a simple statement
	// may stand there, so their guard is a call of a closure, not an if.
	posts map[ast.Stmt]bool
}

func (g *gen) walkFile(f *ast.File) {
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		g.fn, g.recv = funcName(fd), ""
		if fd.Recv != nil && len(fd.Recv.List) == 1 && len(fd.Recv.List[0].Names) == 1 {
			g.recv = fd.Recv.List[0].Names[0].Name
		}
		if cond := bugOnlyGuard(fd.Body); cond != nil {
			// The whole function is a known-bug variant's: only the
			// switch itself is the reference's.
			g.walk(cond)
			continue
		}
		if g.bugOnly[fd.Name.Name] {
			continue // only known-bug code calls it
		}
		g.walk(fd.Body)
	}
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return "(" + star + id.Name + ")." + fd.Name.Name
	}
	return fd.Name.Name
}

// walk visits n, skipping known-bug branches and nested function literals'
// nothing (they are part of their enclosing function).
func (g *gen) walk(n ast.Node) {
	ast.Inspect(n, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.ArrayType:
			return false // a length must stay constant
		case *ast.GenDecl:
			if x.Tok == token.CONST {
				return false
			}
		case *ast.IfStmt:
			if isBugSwitch(x.Cond) {
				// Mutate the condition (switching a bug on is a real
				// change), never the variant's own code.
				g.walk(x.Cond)
				if x.Else != nil {
					g.walk(x.Else)
				}
				return false
			}
			g.ifStmt(x)
		case *ast.BinaryExpr:
			g.binary(x)
		case *ast.UnaryExpr:
			if x.Op == token.NOT {
				g.addExpr(x, OpBoolFlip, "!x -> x", edit{g.off(x.Pos()), g.off(x.Pos()) + 1, ""})
			}
		case *ast.Ident:
			if x.Name == "true" || x.Name == "false" {
				to := map[string]string{"true": "false", "false": "true"}[x.Name]
				if g.isBool(x) {
					g.addExpr(x, OpBoolFlip, x.Name+" -> "+to, edit{g.off(x.Pos()), g.off(x.End()), to})
				}
			}
		case *ast.ForStmt:
			if x.Post != nil {
				if g.posts == nil {
					g.posts = map[ast.Stmt]bool{}
				}
				g.posts[x.Post] = true
			}
		case *ast.IncDecStmt:
			to := map[token.Token]string{token.INC: "--", token.DEC: "++"}[x.Tok]
			g.addStmt(x, x.TokPos, OpIncrement, x.Tok.String()+" -> "+to, edit{g.off(x.TokPos), g.off(x.TokPos) + 2, to})
		case *ast.AssignStmt:
			g.assign(x)
		case *ast.BlockStmt:
			g.block(x.List)
		case *ast.CaseClause:
			g.block(x.Body)
		case *ast.CommClause:
			g.block(x.Body)
		}
		return true
	})
}

// bugOnlyFuncs names the functions only a known-bug variant runs: those
// that return at once unless their switch is on (bugOnlyGuard), and those
// named nowhere but in known-bug code (a bug branch's body, or such a
// function), to a fixed point. Names are matched without their receiver
// type, so a name also used by reference code is never included.
func bugOnlyFuncs(files []*ast.File) map[string]bool {
	only, declared := map[string]bool{}, map[string]bool{}
	var decls []*ast.FuncDecl
	for _, f := range files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				decls = append(decls, fd)
				declared[fd.Name.Name] = true
				if bugOnlyGuard(fd.Body) != nil {
					only[fd.Name.Name] = true
				}
			}
		}
	}
	for changed := true; changed; {
		changed = false
		inBug, outside := map[string]bool{}, map[string]bool{}
		for _, fd := range decls {
			if only[fd.Name.Name] {
				markNames(fd.Body, inBug)
				continue
			}
			var visit func(n ast.Node) bool
			visit = func(n ast.Node) bool {
				if is, ok := n.(*ast.IfStmt); ok && isBugSwitch(is.Cond) {
					ast.Inspect(is.Cond, visit)
					markNames(is.Body, inBug)
					if is.Else != nil {
						ast.Inspect(is.Else, visit)
					}
					return false
				}
				if id, ok := n.(*ast.Ident); ok {
					outside[id.Name] = true
				}
				return true
			}
			ast.Inspect(fd.Body, visit)
		}
		for name := range inBug {
			if !only[name] && !outside[name] && declared[name] {
				only[name], changed = true, true
			}
		}
	}
	return only
}

func markNames(n ast.Node, names map[string]bool) {
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			names[id.Name] = true
		}
		return true
	})
}

// bugOnlyGuard returns the condition of a body that opens with
// `if !x.Bugs.Y { return }`: the rest of it runs only with the bug on.
func bugOnlyGuard(body *ast.BlockStmt) ast.Expr {
	if len(body.List) == 0 {
		return nil
	}
	is, ok := body.List[0].(*ast.IfStmt)
	if !ok || is.Init != nil || is.Else != nil || len(is.Body.List) != 1 {
		return nil
	}
	if _, ok := is.Body.List[0].(*ast.ReturnStmt); !ok {
		return nil
	}
	if u, ok := is.Cond.(*ast.UnaryExpr); ok && u.Op == token.NOT {
		if sel, ok := u.X.(*ast.SelectorExpr); ok && isBugSwitch(sel) {
			return is.Cond
		}
	}
	return nil
}

// isBugSwitch reports whether cond reads a known-bug switch (x.Bugs.Y),
// alone or combined with && (the branch then runs only with the bug on).
func isBugSwitch(cond ast.Expr) bool {
	switch c := cond.(type) {
	case *ast.ParenExpr:
		return isBugSwitch(c.X)
	case *ast.BinaryExpr:
		if c.Op == token.LAND {
			return isBugSwitch(c.X) || isBugSwitch(c.Y)
		}
	case *ast.SelectorExpr:
		if inner, ok := c.X.(*ast.SelectorExpr); ok && inner.Sel.Name == "Bugs" {
			return true
		}
	}
	return false
}

var (
	boundary = map[token.Token]token.Token{token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR}
	negation = map[token.Token]token.Token{token.EQL: token.NEQ, token.NEQ: token.EQL, token.LSS: token.GEQ,
		token.LEQ: token.GTR, token.GTR: token.LEQ, token.GEQ: token.LSS}
	arith = map[token.Token]token.Token{token.ADD: token.SUB, token.SUB: token.ADD, token.MUL: token.QUO,
		token.QUO: token.MUL, token.REM: token.MUL}
	logical = map[token.Token]token.Token{token.LAND: token.LOR, token.LOR: token.LAND}
)

func (g *gen) binary(x *ast.BinaryExpr) {
	op := x.Op
	rep := func(kind string, to token.Token) {
		g.addExprAt(x, x.OpPos, kind, op.String()+" -> "+to.String(),
			edit{g.off(x.OpPos), g.off(x.OpPos) + len(op.String()), to.String()})
	}
	if to, ok := boundary[op]; ok {
		rep(OpBoundary, to)
	}
	if to, ok := negation[op]; ok {
		rep(OpNegation, to)
	}
	if to, ok := arith[op]; ok && g.numeric(x) {
		rep(OpArithmetic, to)
	}
	if to, ok := logical[op]; ok {
		rep(OpLogical, to)
	}
}

func (g *gen) assign(x *ast.AssignStmt) {
	switch x.Tok {
	case token.ADD_ASSIGN, token.SUB_ASSIGN:
		if len(x.Lhs) == 1 && g.numeric(x.Lhs[0]) {
			to := map[token.Token]token.Token{token.ADD_ASSIGN: token.SUB_ASSIGN, token.SUB_ASSIGN: token.ADD_ASSIGN}[x.Tok]
			g.addStmt(x, x.TokPos, OpArithmetic, x.Tok.String()+" -> "+to.String(),
				edit{g.off(x.TokPos), g.off(x.TokPos) + 2, to.String()})
		}
	}
}

// block offers statement-level mutants over one statement list: deleting
// an effect statement, and swapping two consecutive store writes.
func (g *gen) block(list []ast.Stmt) {
	for i, s := range list {
		if deletable(s) && !g.callsBugOnly(s) {
			g.addStmt(s, s.Pos(), OpDeleteStmt, "removed: "+g.snippet(s), edit{g.off(s.Pos()), g.off(s.End()), ""})
		}
		if i+1 < len(list) && g.writesStore(s) && g.writesStore(list[i+1]) {
			a, b := s, list[i+1]
			ta := string(g.src[g.off(a.Pos()):g.off(a.End())])
			tb := string(g.src[g.off(b.Pos()):g.off(b.End())])
			m := g.add(a.Pos(), OpSwapWrites, "swapped with the next statement",
				edit{g.off(a.Pos()), g.off(a.End()), tb}, edit{g.off(b.Pos()), g.off(b.End()), ta})
			// Guarded: b runs first at a's place, and is skipped at its own.
			m.wraps = []wrap{{off: g.off(a.Pos()), end: g.off(a.End()), kind: wrapPrefix, mut: tb},
				{off: g.off(b.Pos()), end: g.off(b.End()), kind: wrapSkip}}
		}
	}
}

// callsBugOnly: s is a call of a function that does nothing unless a
// known-bug switch is on (removing it changes only the variant).
func (g *gen) callsBugOnly(s ast.Stmt) bool {
	x, ok := s.(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := x.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	switch f := call.Fun.(type) {
	case *ast.Ident:
		return g.bugOnly[f.Name]
	case *ast.SelectorExpr:
		return g.bugOnly[f.Sel.Name]
	}
	return false
}

// deletable: statements whose only purpose is an effect. A := declaration
// is not (deleting it cannot compile), nor is a control statement.
func deletable(s ast.Stmt) bool {
	switch x := s.(type) {
	case *ast.ExprStmt:
		call, isCall := x.X.(*ast.CallExpr)
		if !isCall {
			return false
		}
		// A removed panic would leave a function without its terminating
		// statement: it cannot compile.
		id, ok := call.Fun.(*ast.Ident)
		return !ok || id.Name != "panic"
	case *ast.AssignStmt:
		return x.Tok != token.DEFINE
	case *ast.IncDecStmt:
		return true
	}
	return false
}

// storeMethods are impl.Store's writing methods.
var storeMethods = map[string]bool{
	"Enqueue": true, "EnqueueLeased": true, "Ack": true, "Fail": true, "Requeue": true,
	"AdvanceCursors": true, "PutCursorBlind": true, "DeleteExpired": true, "TrimPerSubscriber": true,
	"RecordDelivered": true, "MarkProcessed": true, "Claim": true,
}

// writesStore reports whether a statement writes durable state: in an
// engine, a call of a store method through a value named store; inside a
// store, an assignment to or delete from the receiver's fields.
func (g *gen) writesStore(s ast.Stmt) bool {
	switch x := s.(type) {
	case *ast.DeclStmt, *ast.CaseClause, *ast.CommClause, *ast.LabeledStmt:
		return false // not a statement that can move (a switch body lists its clauses)
	case *ast.AssignStmt:
		if x.Tok == token.DEFINE {
			return false // its names would leave their scope
		}
	}
	found := false
	ast.Inspect(s, func(n ast.Node) bool {
		if found {
			return false
		}
		switch x := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && storeMethods[sel.Sel.Name] && namesStore(sel.X) {
				found = true
			}
			if id, ok := x.Fun.(*ast.Ident); ok && id.Name == "delete" && len(x.Args) > 0 && g.rootedAtRecv(x.Args[0]) {
				found = true
			}
		case *ast.AssignStmt:
			if x.Tok != token.DEFINE {
				for _, l := range x.Lhs {
					if g.rootedAtRecv(l) && g.recvIsStore() {
						found = true
					}
				}
			}
		}
		return true
	})
	return found
}

func namesStore(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name == "store" || x.Name == "st"
	case *ast.SelectorExpr:
		return x.Sel.Name == "store" || x.Sel.Name == "st"
	}
	return false
}

// recvIsStore: inside a store package every method of the store type writes
// state through its receiver; elsewhere receiver writes are in-memory.
func (g *gen) recvIsStore() bool {
	return g.recv != "" && strings.HasSuffix(g.opts.Pkg, "store")
}

func (g *gen) rootedAtRecv(e ast.Expr) bool {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return g.recv != "" && x.Name == g.recv
		case *ast.SelectorExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		default:
			return false
		}
	}
}

// ifStmt: an `if err != nil` (or `if err == nil` negated elsewhere) check
// whose branch is never taken.
func (g *gen) ifStmt(x *ast.IfStmt) {
	b, ok := x.Cond.(*ast.BinaryExpr)
	if !ok || b.Op != token.NEQ {
		return
	}
	id, ok := b.X.(*ast.Ident)
	nilY, ok2 := b.Y.(*ast.Ident)
	if !ok || !ok2 || nilY.Name != "nil" || !(id.Name == "err" || strings.HasSuffix(id.Name, "Err")) {
		return
	}
	g.addExpr(x.Cond, OpDropErrCheck, g.snippet(x.Cond)+" -> false",
		edit{g.off(x.Cond.Pos()), g.off(x.Cond.End()), "false"})
}

func (g *gen) numeric(e ast.Expr) bool {
	if g.info == nil {
		return true
	}
	tv, ok := g.info.Types[e]
	if !ok || tv.Type == nil {
		return true
	}
	if tv.Value != nil {
		// Constant folding: a mutated constant expression is a different
		// constant, which is fine, unless it is a string.
	}
	bt, ok := tv.Type.Underlying().(*types.Basic)
	return !ok || bt.Info()&types.IsString == 0
}

// typeName spells x's type as Go source in x's file: other packages'
// types through an import alias of their own (added to the guarded file),
// untyped constants as their default type. ok is false when the type has a
// part that cannot be named there (another package's unexported type).
func (g *gen) typeName(x ast.Expr) (name string, imports [][2]string, ok bool) {
	var t types.Type = types.Typ[types.Bool]
	if g.info != nil {
		if tv, found := g.info.Types[x]; found && tv.Type != nil {
			t = types.Default(tv.Type)
		} else if !isBoolish(x) {
			return "", nil, false
		}
	} else if !isBoolish(x) {
		return "", nil, false
	}
	ok = true
	name = types.TypeString(t, func(p *types.Package) string {
		if p.Path() == g.pkgPath() || p.Name() == g.pkgName {
			return ""
		}
		alias := "mutp_" + p.Name()
		imports = append(imports, [2]string{alias, p.Path()})
		return alias
	})
	for _, im := range imports {
		for i := 0; ; {
			j := strings.Index(name[i:], im[0]+".")
			if j < 0 {
				break
			}
			k := i + j + len(im[0]) + 1
			if k < len(name) && name[k] >= 'a' && name[k] <= 'z' {
				ok = false
			}
			i = k
		}
	}
	return name, imports, ok
}

func (g *gen) pkgPath() string { return g.modPath + "/" + g.opts.Pkg }

// isBoolish: expressions whose type is bool whatever the package.
func isBoolish(x ast.Expr) bool {
	switch e := x.(type) {
	case *ast.BinaryExpr:
		switch e.Op {
		case token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ, token.LAND, token.LOR:
			return true
		}
	case *ast.UnaryExpr:
		return e.Op == token.NOT
	case *ast.Ident:
		return e.Name == "true" || e.Name == "false"
	}
	return false
}

func (g *gen) isBool(id *ast.Ident) bool {
	if g.info == nil {
		return true
	}
	tv, ok := g.info.Types[id]
	if !ok || tv.Type == nil {
		return true
	}
	bt, ok := tv.Type.Underlying().(*types.Basic)
	return ok && bt.Info()&types.IsBoolean != 0
}

func (g *gen) off(p token.Pos) int { return g.fset.Position(p).Offset }

func (g *gen) snippet(n ast.Node) string {
	s := string(g.src[g.off(n.Pos()):g.off(n.End())])
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// addExpr adds a mutant that changes the expression x (the edits lie
// inside it).
func (g *gen) addExpr(x ast.Expr, op, change string, es ...edit) {
	g.addExprAt(x, x.Pos(), op, change, es...)
}

func (g *gen) addExprAt(x ast.Expr, p token.Pos, op, change string, es ...edit) {
	m := g.add(p, op, change, es...)
	typ, imports, ok := g.typeName(x)
	w := wrap{off: g.off(x.Pos()), end: g.off(x.End()), kind: wrapExpr, typ: typ, imports: imports}
	w.mut = g.mutated(w, es)
	if !ok {
		m.unguardable = "its type cannot be named in " + g.file
		return
	}
	m.wraps = []wrap{w}
}

// addStmt adds a mutant that changes the statement s.
func (g *gen) addStmt(s ast.Stmt, p token.Pos, op, change string, es ...edit) {
	m := g.add(p, op, change, es...)
	w := wrap{off: g.off(s.Pos()), end: g.off(s.End()), kind: wrapStmt}
	if g.posts[s] {
		w.kind = wrapPost
	}
	w.mut = g.mutated(w, es)
	m.wraps = []wrap{w}
}

// mutated is the original text of w's range with the edits made.
func (g *gen) mutated(w wrap, es []edit) string {
	seg := []byte(string(g.src[w.off:w.end]))
	shifted := make([]edit, len(es))
	for i, e := range es {
		shifted[i] = edit{e.off - w.off, e.end - w.off, e.text}
	}
	return string(Mutant{edits: shifted}.Apply(seg))
}

func (g *gen) add(p token.Pos, op, change string, es ...edit) *Mutant {
	pos := g.fset.Position(p)
	file := g.opts.Pkg + "/" + g.file
	line := lineText(g.src, pos.Offset)
	g.out = append(g.out, Mutant{
		ID:      fmt.Sprintf("%s:%d:%d:%s", file, pos.Line, pos.Column, op),
		Package: g.opts.Pkg, File: file, Line: pos.Line, Col: pos.Column,
		Operator: op, Func: g.fn, Snippet: line, Change: change, edits: es,
	})
	return &g.out[len(g.out)-1]
}

// lineText is the source line holding off, trimmed and shortened.
func lineText(src []byte, off int) string {
	start := bytes.LastIndexByte(src[:off], '\n') + 1
	end := bytes.IndexByte(src[off:], '\n')
	if end < 0 {
		end = len(src) - off
	}
	s := strings.Join(strings.Fields(string(src[start:off+end])), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
