package receiver_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/deliverysim/deliverysim/impl/receiver"
	"github.com/deliverysim/deliverysim/impl/webhook"
)

// A bot's endpoint behind the receiver SDK: every request is verified
// (signature, timestamp) and deduplicated by webhook-id, so the handler
// runs once per event although an at-least-once sender delivers some
// events twice. A forged request never reaches it.
func Example_verifyAndDedup() {
	secrets, err := receiver.ParseSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	now := time.Unix(1_700_000_000, 0)
	r, err := receiver.New(receiver.Config{
		Secrets: secrets,
		Window:  24 * time.Hour, // an id is remembered this long
		Now:     func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	runs := 0
	endpoint := r.Handler(func(_ context.Context, ev receiver.Event) error {
		runs++
		fmt.Printf("handling %s: %s\n", ev.ID, ev.Body)
		return nil
	})

	send := func(id, body string, secret []byte) int {
		req := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader([]byte(body)))
		webhook.NewHeaders(secret, id, now.Unix(), []byte(body)).Set(req.Header)
		w := httptest.NewRecorder()
		endpoint.ServeHTTP(w, req)
		return w.Code
	}
	fmt.Println(send("msg_1", `{"n":1}`, secrets[0]))
	fmt.Println(send("msg_1", `{"n":1}`, secrets[0]), "(a retry of msg_1: answered, not run again)")
	fmt.Println(send("msg_2", `{"n":2}`, []byte("not the secret")), "(forged)")
	fmt.Println(send("msg_2", `{"n":2}`, secrets[0]))
	fmt.Println("handler runs:", runs)
	// Output:
	// handling msg_1: {"n":1}
	// 200
	// 200 (a retry of msg_1: answered, not run again)
	// 401 (forged)
	// handling msg_2: {"n":2}
	// 200
	// handler runs: 2
}
