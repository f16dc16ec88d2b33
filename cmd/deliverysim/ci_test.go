package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"testing"

	"github.com/deliverysim/deliverysim/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mutate's JUnit goes through the same writer as every other --junit: one
// suite per package, a survivor fails, invalid and equivalent mutants are
// skipped, and the counts add up at both levels.
func TestMutateJUnitUsesTheSharedWriter(t *testing.T) {
	rep := &mutate.Report{Packages: []string{"impl/engine", "impl/memstore"}}
	add := func(id, pkg, status string) {
		o := mutate.Outcome{Status: status, Seconds: 1.5}
		o.ID, o.Package, o.Change = id, pkg, "a < b -> a <= b"
		rep.Mutants = append(rep.Mutants, o)
	}
	add("m1", "impl/engine", mutate.Killed)
	add("m2", "impl/engine", mutate.Survived)
	add("m3", "impl/engine", mutate.Invalid)
	add("m4", "impl/memstore", mutate.Equivalent)
	path := filepath.Join(t.TempDir(), "mutate.xml")
	require.NoError(t, writeMutateJUnit(path, rep))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var js xunitSuites
	require.NoError(t, xml.Unmarshal(data, &js), "%s", data)
	assert.Equal(t, "deliverysim mutate", js.Name)
	assert.Equal(t, [4]int{4, 1, 0, 2}, [4]int{js.Tests, js.Failures, js.Errors, js.Skipped})
	require.Len(t, js.Suites, 2)
	e := js.Suites[0]
	assert.Equal(t, "mutate/impl/engine", e.Name)
	assert.Equal(t, [3]int{3, 1, 1}, [3]int{e.Tests, e.Failures, e.Skipped})
	assert.Equal(t, "4.500", e.Time)
	require.Len(t, e.Cases, 3)
	assert.Equal(t, "mutate.impl.engine", e.Cases[1].Classname)
	require.NotNil(t, e.Cases[1].Failure)
	assert.Equal(t, "survived: a < b -> a <= b", e.Cases[1].Failure.Message)
	require.NotNil(t, e.Cases[2].Skipped)
	assert.Equal(t, mutate.Invalid, e.Cases[2].Skipped.Message)
	assert.Nil(t, e.Cases[0].Failure)
	assert.Equal(t, 1, js.Suites[1].Skipped)
}
