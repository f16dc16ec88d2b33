package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deliverysim/deliverysim/conformance"
)

// Issue 38: a linearizability failure wrote ./artifacts/linearizability-
// *.html (1.5 MB) into whatever folder certify ran in, and nothing said
// so. Now the files go to --artifacts DIR, else $DELIVERYSIM_ARTIFACTS,
// else a folder of the run's own under the temp folder; the report names
// the folder (artifacts_dir) and the failure names the file. Through the
// built binaries: a conformance.Main program whose store has a planted
// bug the Linearizability group catches, and deliverysim certify.
func TestCertifyArtifacts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries: not in -short")
	}
	bin := builtCLI(t)
	buggy := filepath.Join(t.TempDir(), "buggymain")
	if err := goBuild(buggy, "./testdata/buggymain"); err != nil {
		t.Fatal(err)
	}
	// failed runs buggy in a fresh working directory with its own TMPDIR
	// and returns the certificate, the working directory and the TMPDIR.
	failed := func(t *testing.T, env []string, args ...string) (conformance.Certificate, string, string) {
		t.Helper()
		cwd, tmp := t.TempDir(), t.TempDir()
		args = append([]string{"--only", "Linearizability/PerKey", "--json"}, args...)
		code, out, errS := runBinaryIn(t, cwd, append([]string{"TMPDIR=" + tmp, "DELIVERYSIM_ARTIFACTS="}, env...), buggy, args...)
		var cert conformance.Certificate
		if err := json.Unmarshal([]byte(out), &cert); err != nil || code != 1 {
			t.Fatalf("exit %d (%v); want 1 and a certificate\nstderr: %s\n%.1000s", code, err, errS, out)
		}
		return cert, cwd, tmp
	}
	// written checks that the failure wrote its history into dir and
	// named the file.
	written := func(t *testing.T, cert conformance.Certificate, dir string) {
		t.Helper()
		if cert.ArtifactsDir != dir {
			t.Errorf("artifacts_dir %q; want %q", cert.ArtifactsDir, dir)
		}
		files, _ := filepath.Glob(filepath.Join(dir, "linearizability-*.html"))
		if len(files) != 1 {
			t.Fatalf("files in %s: %v; want one history", dir, files)
		}
		if fails := cert.Failures(); len(fails) == 0 || !strings.Contains(fails[0].Message, files[0]) {
			t.Errorf("the failure does not name %s: %+v", files[0], fails)
		}
	}

	t.Run("DefaultIsATempFolderOfItsOwn", func(t *testing.T) {
		cert, cwd, tmp := failed(t, nil)
		if ents, _ := os.ReadDir(cwd); len(ents) > 0 {
			t.Errorf("the working directory got %v", ents)
		}
		parent := filepath.Join(tmp, "deliverysim-certify")
		if filepath.Dir(cert.ArtifactsDir) != parent {
			t.Fatalf("artifacts_dir %q; want a folder under %s", cert.ArtifactsDir, parent)
		}
		written(t, cert, cert.ArtifactsDir)
	})
	t.Run("Flag", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "not-yet", "made")
		cert, _, _ := failed(t, nil, "--artifacts", dir)
		written(t, cert, dir)
	})
	t.Run("Environment", func(t *testing.T) {
		dir := t.TempDir()
		cert, _, _ := failed(t, []string{"DELIVERYSIM_ARTIFACTS=" + dir})
		written(t, cert, dir)
	})
	// A folder that cannot be made is refused before the run, on both
	// doors, with one line.
	t.Run("RefusedBeforeTheRun", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range [][]string{{buggy}, {bin, "certify", "--backend", "memory"}} {
			code, out, errS := runBinary(t, nil, cmd[0], append(cmd[1:], "--artifacts", filepath.Join(file, "sub"))...)
			if code != 2 || out != "" || strings.Count(strings.TrimSpace(errS), "\n") != 0 || !strings.Contains(errS, "is not a directory") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and one line", filepath.Base(cmd[0]), code, out, errS)
			}
		}
	})
	t.Run("CertifyReportsItsFolder", func(t *testing.T) {
		dir := t.TempDir()
		code, out, errS := runBinary(t, nil, bin, "certify", "--backend", "memory", "--checks", "5", "--only", "Contract", "--json", "--artifacts", dir)
		var cert conformance.Certificate
		if err := json.Unmarshal([]byte(out), &cert); err != nil || code != 0 || cert.ArtifactsDir != dir {
			t.Errorf("exit %d (%v), artifacts_dir %q; want 0 and %q\n%s", code, err, cert.ArtifactsDir, dir, errS)
		}
	})
}
