package conformance

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// storeText is impl/store.go as prose: comment markers dropped and white
// space collapsed, so that a rule quoted on one line matches a sentence
// the file wraps over several.
func storeText(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../impl/store.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		line = strings.TrimPrefix(strings.TrimPrefix(line, "//"), "-")
		b.WriteString(line + " ")
	}
	return collapse(b.String())
}

var spaces = regexp.MustCompile(`\s+`)

func collapse(s string) string { return spaces.ReplaceAllString(strings.TrimSpace(s), " ") }

// Every check names the rule it enforces, and the rule is in the contract's
// own words: a store written from impl/store.go alone can meet every
// check (the cancelled-context and closed-store checks failed such a store
// while no document stated them).
func TestEveryCheckNamesItsRule(t *testing.T) {
	text := storeText(t)
	for _, c := range allChecks() {
		switch {
		case c.rule == "":
			t.Errorf("%s names no rule of impl/store.go", c.fullName())
		case !strings.Contains(text, collapse(c.rule)):
			t.Errorf("%s names a rule impl/store.go does not state: %q", c.fullName(), c.rule)
		}
	}
}

// The error classes: every cause of an error the suite checks (a done
// context, a closed store, a fault with or without a known outcome) is
// stated.
func TestContractStatesEveryErrorClass(t *testing.T) {
	text := storeText(t)
	for _, want := range []string{
		"a call whose context is already done returns an error and takes no effect",
		"after Close every method returns an error",
		"unless the error wraps ErrAmbiguous or is a transport error",
		"are results, never errors",
		collapse(errorRule),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("impl/store.go does not state %q", want)
		}
	}
}

// README tells an outside module how to depend on this one while it is
// unpublished (a replace directive), and installs nowhere with @latest,
// which cannot resolve an unpublished module.
func TestReadmeInstallsWhatResolves(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	if bad := regexp.MustCompile(`go (install|get) github\.com/deliverysim/deliverysim\S*@latest\s*(&&|$)`).FindString(readme); bad != "" {
		t.Errorf("README installs an unpublished module with @latest: %q", bad)
	}
	if !strings.Contains(readme, "-replace=github.com/deliverysim/deliverysim=") {
		t.Error("README does not say how an outside module depends on this one (a replace directive)")
	}
}
