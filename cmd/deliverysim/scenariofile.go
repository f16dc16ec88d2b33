package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	yaml "go.yaml.in/yaml/v3"
)

// maxScenarioBytes matches the scenario loader's own bound: a larger file
// is refused by it anyway.
const maxScenarioBytes = 1 << 20

// checkSingleDocument refuses a scenario file holding more than one YAML
// document. The loader reads the first and silently ignored the rest, so
// a second scenario pasted below the first (or a stray "---") was never
// run. It runs after the loader accepted the file, so the file exists, is
// regular and parses.
func checkSingleDocument(path string) error {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return nil // a library scenario's name, not a file
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	dec := yaml.NewDecoder(io.LimitReader(f, maxScenarioBytes+1))
	var first yaml.Node
	if err := dec.Decode(&first); err != nil {
		return nil
	}
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("scenario %s: more than one YAML document; a scenario file holds one (remove what follows the first ---)", path)
		}
		// A bare trailing "---" is an empty document, not a second one.
		if len(next.Content) == 0 || (next.Content[0].Kind == yaml.ScalarNode && next.Content[0].Tag == "!!null") {
			continue
		}
		return fmt.Errorf("scenario %s:%d: a second YAML document; a scenario file holds one (split it into two files)", path, next.Content[0].Line)
	}
}
