package readall

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/iotest"
)

// Sized returns what io.ReadAll returns, for right, short, long and
// unknown sizes, through a one-byte reader too, and through a
// MaxBytesReader at, below and above its limit.
func TestSizedIsReadAll(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 4096, 10000} {
		body := bytes.Repeat([]byte("abcdefg"), n)[:n]
		for _, size := range []int64{-1, 0, int64(n) - 1, int64(n), int64(n) + 1, 2*int64(n) + 7} {
			for _, one := range []bool{false, true} {
				var rd io.Reader = bytes.NewReader(body)
				if one {
					rd = iotest.OneByteReader(rd)
				}
				got, err := Sized(rd, size, 1<<20)
				if err != nil || !bytes.Equal(got, body) || got == nil {
					t.Fatalf("n=%d size=%d one=%v: %d bytes, %v", n, size, one, len(got), err)
				}
			}
		}
		for _, limit := range []int64{int64(n) - 1, int64(n), int64(n) + 1} {
			if limit < 0 {
				continue
			}
			want, wantErr := io.ReadAll(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(body)), limit))
			got, err := Sized(http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(body)), limit), int64(n), limit)
			var w, g *http.MaxBytesError
			if !bytes.Equal(got, want) || errors.As(wantErr, &w) != errors.As(err, &g) || (wantErr == nil) != (err == nil) {
				t.Fatalf("n=%d limit=%d: got %d bytes %v, ReadAll %d bytes %v", n, limit, len(got), err, len(want), wantErr)
			}
		}
	}
	if _, err := Sized(iotest.ErrReader(io.ErrUnexpectedEOF), 10, 100); err != io.ErrUnexpectedEOF {
		t.Fatalf("error %v, want the reader's", err)
	}
}
