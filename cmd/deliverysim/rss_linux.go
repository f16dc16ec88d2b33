package main

import "syscall"

// maxRSSBytes is this process's peak resident set size so far (Linux
// reports ru_maxrss in KiB).
func maxRSSBytes() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss) * 1024
}
