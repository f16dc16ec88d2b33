package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/runtime/chaos"
)

// tempPrefixes name the folders chaos and its smoke check make under the
// system temp folder. A chaos that is SIGKILLed cannot remove its own, so
// gc collects them beside the schemas.
var tempPrefixes = []string{chaos.TempPrefixRun, chaos.TempPrefixSmoke}

// tempLeftover is one such folder gc looked at.
type tempLeftover struct {
	Path      string    `json:"path"`
	LastWrite time.Time `json:"last_write"`
	Removed   bool      `json:"removed"`
	Error     string    `json:"error,omitempty"`
}

// maxTempWalk bounds the files read to date one folder: a run's folder
// holds a log and an engine's state, not thousands of files.
const maxTempWalk = 10_000

// gcTempDirs removes the chaos folders under root whose last write (the
// newest modification time of the folder and anything in it: a running
// chaos writes its engine log continuously) is at least older ago.
func gcTempDirs(root string, older time.Duration, now time.Time, dry bool) []tempLeftover {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []tempLeftover
	for _, e := range entries {
		if !e.IsDir() || !hasTempPrefix(e.Name()) {
			continue
		}
		path := filepath.Join(root, e.Name())
		last, ok := lastWrite(path)
		if !ok || now.Sub(last) < older {
			continue
		}
		l := tempLeftover{Path: path, LastWrite: last.UTC()}
		if !dry {
			if err := os.RemoveAll(path); err != nil {
				l.Error = err.Error()
			} else {
				l.Removed = true
			}
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func hasTempPrefix(name string) bool {
	for _, p := range tempPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// lastWrite is the newest modification time under path; ok is false when
// the folder could not be dated within maxTempWalk entries (kept: better
// left behind than removed under a running chaos).
func lastWrite(path string) (time.Time, bool) {
	var last time.Time
	n := 0
	err := filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > maxTempWalk {
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.ModTime().After(last) {
			last = info.ModTime()
		}
		return nil
	})
	return last, err == nil && n <= maxTempWalk
}
