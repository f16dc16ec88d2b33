package main

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// usageBlocks splits usageText into each command's block (its lines up to
// the next command), keyed "run", "bench replay", ...; "common" is the text
// after the command list.
func usageBlocks(t *testing.T) map[string]string {
	t.Helper()
	blocks := map[string]string{}
	cmdLine := regexp.MustCompile(`^  ([a-z]+)\s+(replay|peer)?`)
	cur := ""
	for _, line := range strings.Split(usageText, "\n") {
		if strings.HasPrefix(line, "common flags") {
			cur = "common"
		} else if m := cmdLine.FindStringSubmatch(line); m != nil && cur != "common" {
			cur = strings.TrimSpace(m[1] + " " + m[2])
		}
		if cur != "" {
			blocks[cur] += line + "\n"
		}
	}
	return blocks
}

var defaultsFlag = regexp.MustCompile(`(?m)^  -([a-z-]+)`)

// The usage text names every command and, for each, every flag its flag set
// defines (as `cmd -h` prints them); the common flags are described once.
func TestUsageListsEveryCommandAndFlag(t *testing.T) {
	blocks := usageBlocks(t)
	commands := [][]string{{"run"}, {"sweep"}, {"merge"}, {"triage"}, {"cause"}, {"trace"}, {"scenarios"}, {"mutants"},
		{"certify"}, {"gc"}, {"bench", "replay"}, {"bench", "peer"}, {"chaos"}}
	for _, cmd := range commands {
		name := strings.Join(cmd, " ")
		block, ok := blocks[name]
		if !ok {
			t.Errorf("the usage text has no entry for %q", name)
			continue
		}
		code, out, errS := cli(t, nil, append(cmd, "-h")...)
		if code != 0 {
			t.Fatalf("%s -h: exit %d %s", name, code, errS)
		}
		flags := defaultsFlag.FindAllStringSubmatch(out, -1)
		if len(flags) == 0 {
			t.Fatalf("%s -h lists no flags:\n%s", name, out)
		}
		for _, f := range flags {
			if !strings.Contains(block, "--"+f[1]) && !strings.Contains(blocks["common"], "--"+f[1]) {
				t.Errorf("usage text: %s does not mention its flag --%s", name, f[1])
			}
		}
		if !strings.Contains(usageText, "  "+cmd[0]) {
			t.Errorf("usage text lacks command %s", cmd[0])
		}
		_, _, unknown := cli(t, nil, "no-such-command")
		if !strings.Contains(unknown, cmd[0]) {
			t.Errorf("the unknown-command error does not list %s: %s", cmd[0], unknown)
		}
	}
	// serve has a flag per setting and its own -h; the usage text says so.
	if !strings.Contains(blocks["serve"], "serve -h lists every flag") {
		t.Error("the usage text does not point at serve -h")
	}
}

// Every field of every JSON report is described in json.md.
func TestEveryJSONFieldIsDocumented(t *testing.T) {
	for _, v := range []any{runReport{}, sweepReport{}, failingSeed{}, seedError{}, shardInfo{}, determinismInfo{}, sweepResources{},
		scenariosReport{}, scenarioRow{}, mutantsReport{}, certifyReport{}, guarantee{}, gcReport{}, minReport{}, expectation{}} {
		typ := reflect.TypeOf(v)
		for i := 0; i < typ.NumField(); i++ {
			tag := strings.Split(typ.Field(i).Tag.Get("json"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			if !strings.Contains(jsonDoc, "`"+tag+"`") {
				t.Errorf("json.md does not describe %s.%s (`%s`)", typ.Name(), typ.Field(i).Name, tag)
			}
		}
	}
	code, out, _ := cli(t, nil, "help", "json")
	if code != 0 || out != jsonDoc {
		t.Errorf("help json: exit %d, printed %d bytes, want json.md", code, len(out))
	}
}
