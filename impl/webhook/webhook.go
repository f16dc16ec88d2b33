// Package webhook signs and verifies Standard Webhooks (v1) requests: the
// webhook-id, webhook-timestamp and webhook-signature headers, where the
// signature is "v1," + base64(HMAC-SHA256(secret, id + "." + ts + "." + body)).
//
// The engine signs with it and the receiver SDK verifies with it, so neither
// imports the other. Verification follows the reference library
// (github.com/standard-webhooks/standard-webhooks/libraries, Go) rule for
// rule, and a differential test holds it to that: headers are taken as
// given (an empty one counts as missing), the timestamp is a base-10
// integer, the tolerance is compared on full time (a timestamp exactly
// 300 s old is already too old, because now has a fractional second), the
// signature header is split on single spaces and each token on "," with
// the second part compared. Several secrets may be configured at once so
// that a secret can be rotated without rejecting requests in between.
//
// Nothing here reads a clock: the caller passes now, so the simulator can
// verify under virtual time.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Header names (net/http canonicalises them on lookup).
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is the largest accepted distance between now and the
// webhook-timestamp, the value the specification and the reference library
// use.
const DefaultTolerance = 5 * time.Minute

// SecretPrefix marks a secret in its textual form: "whsec_" + base64(key).
const SecretPrefix = "whsec_"

// Verification errors; Verify wraps one of them with detail.
var (
	ErrMissingHeaders   = errors.New("missing required headers")
	ErrInvalidTimestamp = errors.New("invalid webhook-timestamp")
	ErrTooOld           = errors.New("webhook-timestamp too old")
	ErrTooNew           = errors.New("webhook-timestamp too far in the future")
	ErrNoMatch          = errors.New("no matching webhook-signature")
)

// ParseSecret decodes a secret in the "whsec_<base64>" form. Like the
// reference library it also takes bare base64 (the prefix is optional).
// An empty key is not an error here; the receiver's configuration rejects
// it.
func ParseSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
	if err != nil {
		return nil, fmt.Errorf("webhook secret must be %q followed by standard base64: %w", SecretPrefix, err)
	}
	return key, nil
}

// FormatSecret is ParseSecret's inverse.
func FormatSecret(key []byte) string {
	return SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// Sign returns the webhook-signature value for one request.
func Sign(secret []byte, id string, ts int64, body []byte) string {
	return NewSigner(secret).Sign(id, ts, body)
}

// Signer signs with one secret. It keeps the keyed HMAC: after its first
// use, Reset restores the precomputed key state instead of hashing the key
// pads again, which halves the work of signing a short webhook body and
// saves its allocations. The engine signs every send, so this matters.
// A Signer is not safe for concurrent use.
type Signer struct {
	mac    hash.Hash
	msg    []byte            // scratch for "id.ts.body"
	digest [sha256.Size]byte // scratch for the digest: a local escapes through hash.Hash.Sum, one allocation per signature
}

// NewSigner returns a Signer for secret.
func NewSigner(secret []byte) *Signer {
	return &Signer{mac: hmac.New(sha256.New, secret)}
}

// Sign returns "v1," + the base64 HMAC of "id.ts.body".
func (s *Signer) Sign(id string, ts int64, body []byte) string {
	var out [len(version) + 1 + sigLen]byte
	copy(out[:], version+",")
	s.sum(out[len(version)+1:], id, ts, body)
	return string(out[:])
}

// AppendSign appends Sign's value to dst: no allocation when dst has room
// (the engine cuts its signatures from shared blocks with it).
func (s *Signer) AppendSign(dst []byte, id string, ts int64, body []byte) []byte {
	dst = slices.Grow(dst, len(version)+1+sigLen)
	dst = append(dst, version+","...)
	n := len(dst)
	dst = dst[:n+sigLen]
	s.sum(dst[n:], id, ts, body)
	return dst
}

const (
	version = "v1"
	sigLen  = 44 // base64 length of a 32-byte digest
)

// sum writes the base64 signature (without its version) into dst.
func (s *Signer) sum(dst []byte, id string, ts int64, body []byte) {
	s.mac.Reset()
	// One Write of the whole message: the digest then hashes full blocks
	// straight from it instead of buffering the header first.
	m := append(appendSignedHead(s.msg[:0], id, ts), body...)
	s.msg = m
	_, _ = s.mac.Write(m)
	base64.StdEncoding.Encode(dst, s.mac.Sum(s.digest[:0]))
}

// appendSignedHead appends "id.ts.", what the signed message holds before
// the body.
func appendSignedHead(b []byte, id string, ts int64) []byte {
	b = append(b, id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, ts, 10)
	return append(b, '.')
}

// verifySum is Signer.sum for one verification: a fresh Signer would copy
// the whole message into a scratch buffer used once (a tenth of a sweep's
// allocations), so the header and the body are hashed in two writes
// instead (the same HMAC).
func verifySum(dst, key []byte, id string, ts int64, body []byte) {
	k := keyedMAC{mac: hmac.New(sha256.New, key)}
	k.hashSigned(dst, id, ts, body)
}

// keyedMAC is an HMAC with the scratch its message head is written from
// and its digest summed into (either on the stack escapes through the
// hash.Hash interface: an allocation per check each).
type keyedMAC struct {
	mac    hash.Hash
	head   [64]byte
	digest [sha256.Size]byte
}

// hashSigned writes into dst the base64 signature of "id.ts.body" by k's
// mac, freshly keyed or reset.
func (k *keyedMAC) hashSigned(dst []byte, id string, ts int64, body []byte) {
	_, _ = k.mac.Write(appendSignedHead(k.head[:0], id, ts))
	_, _ = k.mac.Write(body)
	base64.StdEncoding.Encode(dst, k.mac.Sum(k.digest[:0]))
}

// The header names in canonical form, as http.Header.Get and Set use them:
// canonicalising a lower-case name allocates a new string on every call,
// and every delivery sets and reads all three.
var (
	canonID        = http.CanonicalHeaderKey(HeaderID)
	canonTimestamp = http.CanonicalHeaderKey(HeaderTimestamp)
	canonSignature = http.CanonicalHeaderKey(HeaderSignature)
)

// first is h.Get(key) for a key already canonical.
func first(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Headers are the three Standard Webhooks headers exactly as received.
type Headers struct {
	ID        string
	Timestamp string
	Signature string
}

// HeadersOf reads the headers from an HTTP request's header map (the first
// value of each, as http.Header.Get and the reference library do).
func HeadersOf(h http.Header) Headers {
	return Headers{ID: first(h, canonID), Timestamp: first(h, canonTimestamp), Signature: first(h, canonSignature)}
}

// Set writes the headers into h.
func (hs Headers) Set(h http.Header) {
	// One allocation for the three values, each its own full slice (an
	// append to one cannot reach the next).
	vs := &[3]string{hs.ID, hs.Timestamp, hs.Signature}
	h[canonID] = vs[0:1:1]
	h[canonTimestamp] = vs[1:2:2]
	h[canonSignature] = vs[2:3:3]
}

// NewHeaders returns the headers a sender attaches to one request.
func NewHeaders(secret []byte, id string, ts int64, body []byte) Headers {
	return Headers{ID: id, Timestamp: strconv.FormatInt(ts, 10), Signature: Sign(secret, id, ts, body)}
}

// Verifier checks requests against one or more secrets. The zero Tolerance
// means DefaultTolerance. A Verifier is safe for concurrent use.
type Verifier struct {
	Secrets   [][]byte      // any one may have signed; order does not matter
	Tolerance time.Duration // max distance between now and webhook-timestamp

	// keyed holds, per secret (same index), HMACs whose key pads are
	// already hashed (see Prepared); nil: each check keys a fresh HMAC.
	keyed []*sync.Pool
}

// Prepared returns v with its secrets' HMAC key state kept between
// verifications: a receiver verifies every request with the same few
// secrets, and keying a fresh HMAC hashes two pad blocks and allocates
// the hash states each time (a third of a short body's verification).
// A pool per secret keeps it safe for concurrent use. Secrets must not
// change afterwards.
func (v Verifier) Prepared() *Verifier {
	v.keyed = make([]*sync.Pool, len(v.Secrets))
	for i, key := range v.Secrets {
		v.keyed[i] = &sync.Pool{New: func() any { return &keyedMAC{mac: hmac.New(sha256.New, key)} }}
	}
	return &v
}

// Verify checks one request received at now and returns its timestamp. The
// checks run in the reference library's order: missing headers, timestamp
// syntax, tolerance, signature.
func (v Verifier) Verify(now time.Time, h Headers, body []byte) (int64, error) {
	if h.ID == "" || h.Timestamp == "" || h.Signature == "" {
		return 0, ErrMissingHeaders
	}
	ts, err := strconv.ParseInt(h.Timestamp, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a Unix time in seconds", ErrInvalidTimestamp, h.Timestamp)
	}
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	// The same time arithmetic as the reference library, so that extreme
	// values (where time.Unix wraps and Sub saturates) decide alike.
	at := time.Unix(ts, 0)
	if d := now.Sub(at); d > tol {
		return 0, fmt.Errorf("%w: %v old, tolerance %v", ErrTooOld, d, tol)
	}
	if at.After(now.Add(tol)) {
		return 0, fmt.Errorf("%w: %v ahead, tolerance %v", ErrTooNew, at.Sub(now), tol)
	}
	var want [sigLen]byte
	for i, key := range v.Secrets {
		if v.keyed != nil {
			k := v.keyed[i].Get().(*keyedMAC)
			k.mac.Reset() // restores the key state after the first use
			k.hashSigned(want[:], h.ID, ts, body)
			v.keyed[i].Put(k)
		} else {
			verifySum(want[:], key, h.ID, ts, body)
		}
		if match(h.Signature, want[:]) {
			return ts, nil
		}
	}
	return 0, ErrNoMatch
}

// match reports whether any "v1,<sig>" token of header carries want. Tokens
// are separated by single spaces and split on ","; a token's second part is
// compared in constant time, later parts are ignored (as the reference
// library does).
func match(header string, want []byte) bool {
	for tok := range strings.SplitSeq(header, " ") {
		ver, rest, ok := strings.Cut(tok, ",")
		if !ok || ver != version {
			continue
		}
		sig, _, _ := strings.Cut(rest, ",")
		if hmac.Equal([]byte(sig), want) {
			return true
		}
	}
	return false
}
