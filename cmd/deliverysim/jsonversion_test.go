package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Reports whose types live in other packages get their schema_version
// from writeVersionedJSON: first, as a number, with every other field kept.
func TestWriteVersionedJSON(t *testing.T) {
	var b bytes.Buffer
	type rep struct {
		A int    `json:"a"`
		B string `json:"b"`
	}
	if err := writeVersionedJSON(&b, rep{A: 3, B: "x"}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "{\n  \"schema_version\": 1,\n") {
		t.Errorf("schema_version is not the first field:\n%s", b.String())
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["schema_version"] != float64(schemaVersion) || got["a"] != float64(3) || got["b"] != "x" || len(got) != 3 {
		t.Errorf("got %v", got)
	}
	b.Reset()
	if err := writeVersionedJSON(&b, struct{}{}); err != nil || strings.TrimSpace(b.String()) != "{\n  \"schema_version\": 1\n}" {
		t.Errorf("empty object: %q, %v", b.String(), err)
	}
	if err := writeVersionedJSON(&b, []int{1}); err == nil {
		t.Error("a JSON array was accepted as a report")
	}
}

// Every --json output that runs in a moment carries schema_version at its
// top level (chaos is checked by its own tests, bench peer by hand: both
// need a server and minutes).
func TestJSONOutputsCarryTheSchemaVersion(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--seed", "3", "--json"},
		{"sweep", "--seeds", "1-3", "--json"},
		{"mutants", "--seeds", "20", "--json"},
		{"mutate", "--list", "--pkg", "impl/receiver", "--json"},
		{"cause", "--seed", "4", "--bugs", "delete-before-send", "--trials", "2", "--json"},
	} {
		code, out, errS := cli(t, nil, args...)
		if code != 0 && code != 1 {
			t.Fatalf("%v: exit %d: %s", args, code, errS)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &top); err != nil {
			t.Fatalf("%v: not one JSON object: %v\n%.300s", args, err, out)
		}
		if string(top["schema_version"]) != "1" {
			t.Errorf("%v: schema_version %q; want 1", args, top["schema_version"])
		}
	}
}
