package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/deliverysim/deliverysim/internal/filekind"
	"github.com/deliverysim/deliverysim/report"
	"github.com/deliverysim/deliverysim/sim"
)

// Report files (--html, --junit, artifacts) are written whole to a
// temporary file and renamed into place, so a reader never sees half a
// report. A rename replaces whatever the name pointed at, so a target that
// exists and is not a regular file (a FIFO, a device node, a socket) is
// refused before anything is written: renaming over /dev/null as root
// would turn the device into a file.

// outputMode is every report file's mode, whether new or replacing a file
// the user made with other permissions.
const outputMode fs.FileMode = 0o644

// refuseSpecialFile fails when path exists and is not a regular file. It
// only looks (stat follows a symlink to what it names); it never opens.
func refuseSpecialFile(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return fmt.Errorf("%s is a directory, not a file", path)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s is a %s, not a regular file; give the path of a file to create or replace", path, filekind.Of(st.Mode()))
	}
	return nil
}

// checkWritableFile tells, before any work, whether a report can be
// written at path: its directory exists, is a directory and takes a new
// file (a temporary one, removed at once), and path is absent or a regular
// file. path itself is not touched.
func checkWritableFile(flagName, path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s %s: the directory %s does not exist", flagName, path, dir)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flagName, path, err)
	case !st.IsDir():
		return fmt.Errorf("%s %s: %s is not a directory", flagName, path, dir)
	}
	if err := refuseSpecialFile(path); err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	f, err := os.CreateTemp(dir, ".deliverysim-check-*")
	if err != nil {
		return fmt.Errorf("%s %s: the directory %s is not writable: %w", flagName, path, dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// writeAtomic writes path through write: into a temporary file beside it,
// renamed over it once complete, with mode outputMode.
func writeAtomic(path string, write func(io.Writer) error) error {
	if err := refuseSpecialFile(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	bw := bufio.NewWriter(f)
	if err := write(bw); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	// CreateTemp makes 0600; a report is read by whoever reads the
	// folder (CI uploaders, a web server), like the trace and scenario
	// files written beside it.
	if err := f.Chmod(outputMode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// Checked again: the target may have been replaced by a FIFO since.
	if err := refuseSpecialFile(path); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// writeHTMLFile writes the HTML report of r to path.
func writeHTMLFile(path string, r *sim.Result, info report.Info) error {
	err := writeAtomic(path, func(w io.Writer) error { return report.WriteHTML(w, r, info) })
	if err != nil {
		return fmt.Errorf("--html: writing %s: %w (the directory must exist and be writable)", path, err)
	}
	return nil
}
