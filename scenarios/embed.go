package scenarios

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
)

// The scenario library is compiled in, so the CLI finds it from any
// working directory.
//
//go:embed *.yaml
var library embed.FS

// The regression scenarios (testdata/regress) are compiled in too: each is
// a failure the harness once found (an engine bug, fixed, or a checker
// mistake) reduced to a file, and part of what a mutant must get past.
//
//go:embed testdata/regress/*.yaml
var regressions embed.FS

// Regressions loads every regression scenario, sorted by file name.
func Regressions() ([]*Scenario, error) {
	return loadEmbedded(regressions, "testdata/regress", false)
}

// All loads every embedded scenario, sorted by name. An embedded file that
// does not load is a bug in this package (its tests load them all).
func All() ([]*Scenario, error) {
	out, err := loadEmbedded(library, ".", true)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for _, s := range out {
		s.RequireFired = true
	}
	return out, nil
}

// loadEmbedded loads the .yaml files of dir in fsys, in file-name order;
// named: each scenario's name must be its file's.
func loadEmbedded(fsys embed.FS, dir string, named bool) ([]*Scenario, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []*Scenario
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		path := e.Name()
		if dir != "." {
			path = dir + "/" + path
		}
		data, err := fsys.ReadFile(path)
		if err != nil {
			return nil, err
		}
		s, err := Load("scenarios/"+path, data)
		if err != nil {
			return nil, err
		}
		if want := strings.TrimSuffix(e.Name(), ".yaml"); named && s.Name != want {
			return nil, fmt.Errorf("scenarios/%s: name %q must match the file name %q", path, s.Name, want)
		}
		// The library's listing tells a user where each story comes from;
		// a file without one would load and run, and fail only the CLI's test.
		if named && (s.Title == "" || s.Source == "") {
			return nil, fmt.Errorf("scenarios/%s: a library scenario needs a title: and a source: line (the seed document or incident it comes from)", path)
		}
		out = append(out, s)
	}
	return out, nil
}

// Find loads a scenario by file path, or, if no such file exists, by the
// name of an embedded scenario ("sealed-during-downtime", or
// "scenarios/sealed-during-downtime.yaml").
func Find(ref string) (*Scenario, error) {
	if _, err := os.Stat(ref); err == nil {
		return LoadFile(ref)
	}
	name := strings.TrimSuffix(strings.TrimPrefix(ref, "scenarios/"), ".yaml")
	if !strings.ContainsAny(name, `/\`) {
		if data, err := library.ReadFile(name + ".yaml"); err == nil {
			return Load("scenarios/"+name+".yaml", data)
		}
	}
	return nil, fmt.Errorf("scenario %q: no such file, and no embedded scenario of that name (deliverysim scenarios lists them)", ref)
}
