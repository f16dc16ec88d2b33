package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"strconv"
)

// Sign returns the Standard Webhooks v1 webhook-signature value for one
// request: "v1," + base64(HMAC-SHA256(secret, id + "." + ts + "." + body)).
// The receiver recomputes it to verify.
func Sign(secret []byte, id string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	var buf [24]byte
	_, _ = io.WriteString(mac, id)
	_, _ = mac.Write([]byte{'.'})
	_, _ = mac.Write(strconv.AppendInt(buf[:0], ts, 10))
	_, _ = mac.Write([]byte{'.'})
	_, _ = mac.Write(body)
	var sum [sha256.Size]byte
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(sum[:0]))
}
