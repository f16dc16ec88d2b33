// Package filekind names what a path is when it is not the regular file a
// command wanted, in the words a refusal prints ("is a directory, not a
// regular file"): the CLI's report targets and the scenario loader share
// it. A mode's type bits alone print a 0755 directory as d---------.
package filekind

import "io/fs"

// Of names the kind of a file of mode m.
func Of(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}
