package main

import (
	"flag"
	"strings"
	"testing"
)

// TestServeHelpDocumentsEveryFlag: serve -h lists each flag with its
// description, and says how the environment sets them.
func TestServeHelpDocumentsEveryFlag(t *testing.T) {
	code, out, _ := cli(t, nil, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help exited %d", code)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	n := 0
	fs.VisitAll(func(fl *flag.Flag) {
		n++
		if !strings.Contains(out, "-"+fl.Name+" ") && !strings.Contains(out, "-"+fl.Name+"\n") {
			t.Errorf("serve --help does not list --%s", fl.Name)
		}
		if fl.Usage == "" {
			t.Errorf("--%s has no description", fl.Name)
		}
	})
	if n < 25 {
		t.Errorf("serve has %d flags; every engine setting should be one", n)
	}
	if !strings.Contains(out, "DELIVERYSIM_WEBHOOK_TIMEOUT") {
		t.Error("serve --help does not say how to set flags from the environment")
	}
}

func TestServeBadInvocation(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"serve"}, nil, "--upstream and --registry are required"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--registry", "http://127.0.0.1:2", "--handoff", "sideways"}, nil, "--handoff"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--registry", "http://127.0.0.1:2", "--lease", "1s"}, nil, "Lease"},
		{[]string{"serve"}, map[string]string{"DELIVERYSIM_MAX_ATTEMPTS": "many"}, "DELIVERYSIM_MAX_ATTEMPTS"},
		{[]string{"serve", "--log-format", "xml"}, nil, "--log-format"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--registry", "http://127.0.0.1:2", "--retention-scope", "some"}, nil, "--retention-scope"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--registry", "http://127.0.0.1:2", "--retention-scope", "held"}, nil, "needs --backend postgres"},
	} {
		code, _, errOut := cli(t, c.env, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line mentioning %q", c.args, code, errOut, c.want)
		}
	}
}
