//go:build !linux

package main

// maxRSSBytes is 0 where the peak resident set is not read (the units of
// ru_maxrss differ between systems).
func maxRSSBytes() int64 { return 0 }
