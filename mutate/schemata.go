package mutate

import (
	"fmt"
	"sort"
	"strings"
)

// The schemata build (mutant schemata, Untch et al. 1993): every mutant of
// a file is compiled into one overlay copy of it, each change guarded by
// mutschema.On(k), so one build serves them all and a mutant is chosen at
// run time by the DELIVERYSIM_MUTANT environment variable. Only the chosen
// branch is evaluated, so the guarded code does exactly what the mutated
// file would. On this shared two-core machine one build costs 20 s or
// more; one build per mutant would cost hours per package.

// SchemaImport is the runtime package the guarded files import.
const SchemaImport = "/mutate/schema"

type wrapKind int

const (
	wrapExpr   wrapKind = iota // func() T { if On(k) { return mut }; return inner }()
	wrapStmt                   // if On(k) { mut } else { inner }
	wrapSkip                   // if !On(k) { inner }
	wrapPrefix                 // if On(k) { mut }; inner
	wrapPost                   // func() { if On(k) { mut } else { inner } }()
)

// wrap guards one node's text range.
type wrap struct {
	off, end int
	kind     wrapKind
	typ      string // wrapExpr: the expression's type
	imports  [][2]string
	mut      string // the mutated text (wrapStmt, wrapExpr), or the statement run first (wrapPrefix)
}

type guard struct {
	wrap
	k int
}

// Guard renders src (one file) with every given mutant guarded; ks[i] is
// mutant ms[i]'s run-time number. Mutants without wraps are skipped.
func Guard(src []byte, pkgNameEnd int, modPath string, ms []Mutant, ks []int) []byte {
	var gs []guard
	imports := map[string]string{}
	for i, m := range ms {
		for _, w := range m.wraps {
			gs = append(gs, guard{w, ks[i]})
			for _, im := range w.imports {
				imports[im[0]] = im[1]
			}
		}
	}
	// Outer ranges first; for equal ranges, the order of generation.
	sort.SliceStable(gs, func(i, j int) bool {
		if gs[i].off != gs[j].off {
			return gs[i].off < gs[j].off
		}
		return gs[i].end > gs[j].end
	})
	var b strings.Builder
	b.Write(src[:pkgNameEnd])
	fmt.Fprintf(&b, "; import mutschema %q", modPath+SchemaImport)
	var aliases []string
	for a := range imports {
		aliases = append(aliases, a)
	}
	sort.Strings(aliases)
	for _, a := range aliases {
		fmt.Fprintf(&b, "; import %s %q", a, imports[a])
	}
	r := &renderer{src: src, gs: gs}
	b.WriteString(r.render(pkgNameEnd, len(src)))
	return []byte(b.String())
}

type renderer struct {
	src []byte
	gs  []guard
	i   int // next guard to place
}

// render returns src[off:end] with every guard inside it applied.
func (r *renderer) render(off, end int) string {
	var b strings.Builder
	at := off
	for r.i < len(r.gs) && r.gs[r.i].off < end {
		start := r.gs[r.i]
		b.Write(r.src[at:start.off])
		// All guards on exactly this range apply one around the other.
		var same []guard
		for r.i < len(r.gs) && r.gs[r.i].off == start.off && r.gs[r.i].end == start.end {
			same = append(same, r.gs[r.i])
			r.i++
		}
		inner := r.render(start.off, start.end)
		for j := len(same) - 1; j >= 0; j-- {
			inner = same[j].apply(inner)
		}
		b.WriteString(inner)
		at = start.end
	}
	b.Write(r.src[at:end])
	return b.String()
}

func (g guard) apply(inner string) string {
	switch g.kind {
	case wrapExpr:
		return fmt.Sprintf("func() %s { if mutschema.On(%d) { return %s }; return %s }()", g.typ, g.k, g.mut, inner)
	case wrapStmt:
		return fmt.Sprintf("if mutschema.On(%d) { %s } else { %s }", g.k, g.mut, inner)
	case wrapSkip:
		return fmt.Sprintf("if !mutschema.On(%d) { %s }", g.k, inner)
	case wrapPrefix:
		return fmt.Sprintf("if mutschema.On(%d) { %s }; %s", g.k, g.mut, inner)
	case wrapPost:
		return fmt.Sprintf("func() { if mutschema.On(%d) { %s } else { %s } }()", g.k, g.mut, inner)
	}
	panic("unknown wrap kind")
}
