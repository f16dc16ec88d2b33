package webhook_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/deliverysim/deliverysim/impl/webhook"
)

// A sender signs each request with the subscriber's secret; the receiver
// verifies the three Standard Webhooks headers against the same secret.
// The webhook-id stays the same across retries: it is the idempotency key.
func Example_signAndVerify() {
	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	body := []byte(`{"event":"file.created","path":"/a.txt"}`)
	sent := time.Unix(1_700_000_000, 0)

	// Sender: the headers of one request.
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/hook", nil)
	webhook.NewHeaders(secret, "msg_2b1", sent.Unix(), body).Set(req.Header)
	fmt.Println("webhook-id:", req.Header.Get(webhook.HeaderID))
	fmt.Println("webhook-timestamp:", req.Header.Get(webhook.HeaderTimestamp))
	fmt.Println("webhook-signature:", req.Header.Get(webhook.HeaderSignature))

	// Receiver: verify what arrived, 30 s later.
	v := webhook.Verifier{Secrets: [][]byte{secret}}
	ts, err := v.Verify(sent.Add(30*time.Second), webhook.HeadersOf(req.Header), body)
	fmt.Println("verified:", err == nil, ts)

	// A body changed in transit does not verify.
	_, err = v.Verify(sent.Add(30*time.Second), webhook.HeadersOf(req.Header), []byte(`{"event":"file.deleted"}`))
	fmt.Println("tampered:", err)

	// Nor does a request replayed outside the tolerance (5 minutes).
	_, err = v.Verify(sent.Add(time.Hour), webhook.HeadersOf(req.Header), body)
	fmt.Println("an hour later:", err)
	// Output:
	// webhook-id: msg_2b1
	// webhook-timestamp: 1700000000
	// webhook-signature: v1,1yVTAdzolrxEDTaOFv4VuJWI86DsajeuRarnGxb8aU8=
	// verified: true 1700000000
	// tampered: no matching webhook-signature
	// an hour later: webhook-timestamp too old: 1h0m0s old, tolerance 5m0s
}
