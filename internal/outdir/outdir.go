// Package outdir checks a folder of outputs before a command starts the
// work whose files go there: deliverysim's sweep and certify, and an
// implementer's conformance.Main, share one rule.
package outdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Check refuses a folder of outputs (an --artifacts flag) that could not
// be written, before the work that would fill it: it may not exist yet
// (it is created), but then its nearest existing parent must take it.
func Check(flagName, dir string) error {
	probe := dir
	for {
		st, err := os.Stat(probe)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s %s: %s is not a directory", flagName, dir, probe)
			}
			break
		}
		// ENOTDIR: a file on the way; the walk up finds and names it.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("%s %s: %w", flagName, dir, err)
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			return fmt.Errorf("%s %s: no existing parent directory", flagName, dir)
		}
		probe = parent
	}
	f, err := os.CreateTemp(probe, ".deliverysim-check-*")
	if err != nil {
		return fmt.Errorf("%s %s: %s is not writable: %w", flagName, dir, probe, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}
