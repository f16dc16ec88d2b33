// Package readall reads a body whose length is known in advance.
package readall

import "io"

// Sized is io.ReadAll(rd) with its buffer sized for a body of size bytes
// (a request's ContentLength, when it is known and at most max): one
// allocation instead of ReadAll's doubling from 512 bytes. The bytes and
// the error are ReadAll's whatever size says (a wrong size costs a grow).
// A size below 0 or above max reads as io.ReadAll does.
func Sized(rd io.Reader, size, max int64) ([]byte, error) {
	if size < 0 || size > max {
		return io.ReadAll(rd)
	}
	b := make([]byte, 0, size+1) // +1: the read that sees EOF needs room
	for {
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}
