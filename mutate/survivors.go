package mutate

import (
	_ "embed"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The reviewed survivors: every mutant the harness does not kill is listed
// in survivors.yaml, either as equivalent (no run of any engine can tell
// it from the original; the entry says why) or as open (a gap in the
// oracle or workload, with what would close it). Equivalent entries leave
// the kill rate's denominator.

//go:embed survivors.yaml
var survivorsYAML []byte

// Survivor is one reviewed entry.
type Survivor struct {
	ID       string `yaml:"id"`
	Func     string `yaml:"func"`
	Line     string `yaml:"line"` // the source line, to find the site again when lines move
	Operator string `yaml:"operator"`
	Status   string `yaml:"status"` // equivalent or open
	Why      string `yaml:"why"`
}

// Survivors is the reviewed list.
type Survivors struct {
	Entries []Survivor `yaml:"survivors"`

	// anchored: the ids of entries that name, exactly, a site of the
	// mutants listed (Anchor); the fallback of Find never hands them to
	// another mutant.
	anchored map[string]bool
}

// Anchor records which entries still sit at their own site among all, the
// whole list of mutants (not a --only or --sample subset). An entry at its
// own site is that mutant's: when a copy of its line (same function,
// operator and column) appears elsewhere, as two identical guards in one
// function do, the copy's mutant is a new site, not the entry's moved one
// (streams.go 354:15 was killed while the 389:15 entry, which sits at its
// own site, was reported stale for it).
func (s *Survivors) Anchor(all []Mutant) {
	if s == nil {
		return
	}
	byID := make(map[string]Mutant, len(all))
	for _, m := range all {
		byID[m.ID] = m
	}
	s.anchored = map[string]bool{}
	for i := range s.Entries {
		if m, ok := byID[s.Entries[i].ID]; ok && s.Entries[i].sitsAt(m) {
			s.anchored[s.Entries[i].ID] = true
		}
	}
}

// sitsAt says whether the entry names m's site as it is now: its id, and
// (when it records one) the same source line there.
func (e *Survivor) sitsAt(m Mutant) bool {
	return e.ID == m.ID && (e.Line == "" || e.Line == m.Snippet)
}

// DefaultSurvivors is the list shipped beside this package.
func DefaultSurvivors() (*Survivors, error) {
	return parseSurvivors(survivorsYAML, "mutate/survivors.yaml")
}

// LoadSurvivors reads a survivors file.
func LoadSurvivors(path string) (*Survivors, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("survivors file: %w", err)
	}
	return parseSurvivors(b, path)
}

func parseSurvivors(b []byte, name string) (*Survivors, error) {
	var s Survivors
	if err := yaml.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %v (see the comment at its top for the format)", name, err)
	}
	for i, e := range s.Entries {
		if e.ID == "" || (e.Status != Equivalent && e.Status != "open") {
			return nil, fmt.Errorf("%s: entry %d (%q): needs an id and status equivalent or open", name, i+1, e.ID)
		}
		if e.Why == "" {
			return nil, fmt.Errorf("%s: entry %d (%s): say why it survives", name, i+1, e.ID)
		}
	}
	return &s, nil
}

// Find returns the entry for m: by id when the entry's source line is
// still the one at that place, or, when lines have moved, by file,
// function, operator, source line and column if exactly one entry
// matches (the column tells apart two sites of one operator on a line:
// `a == 0 || b != c` has two negations). An id
// whose line now holds other code is not a match: after an edit above it,
// the same file:line:col names a different statement, and the entry's
// reasoning (equivalent, say) would be applied to a mutant it never saw.
func (s *Survivors) Find(m Mutant) *Survivor {
	if s == nil {
		return nil
	}
	for i := range s.Entries {
		if e := &s.Entries[i]; e.sitsAt(m) {
			return e
		}
	}
	var hit *Survivor
	for i := range s.Entries {
		e := &s.Entries[i]
		if s.anchored[e.ID] {
			continue
		}
		if e.Func == m.Func && e.Operator == m.Operator && e.Line == m.Snippet && fileOf(e.ID) == m.File && colOf(e.ID) == m.Col {
			if hit != nil {
				return nil
			}
			hit = e
		}
	}
	return hit
}

// colOf is the column part of a mutant id (file:line:col:operator), or
// -1.
func colOf(id string) int {
	parts := strings.Split(id, ":")
	if len(parts) < 4 {
		return -1
	}
	n, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		return -1
	}
	return n
}

// fileOf is the file part of a mutant id.
func fileOf(id string) string {
	for i := 0; i < len(id); i++ {
		if id[i] == ':' {
			return id[:i]
		}
	}
	return id
}
