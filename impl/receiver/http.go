package receiver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/deliverysim/deliverysim/impl/webhook"
	"github.com/deliverysim/deliverysim/internal/readall"
)

type eventKey struct{}

// EventFrom returns the verified event of a request passed on by
// Middleware.
func EventFrom(ctx context.Context) (Event, bool) {
	ev, ok := ctx.Value(eventKey{}).(Event)
	return ev, ok
}

// Middleware verifies and dedups each request and passes new events on to
// next, with the body readable again and the Event in the request's context
// (EventFrom). next answers a new event itself; if it answers anything but
// 2xx (or panics) the id is released so that the sender's retry reaches it
// again. Requests that do not reach next get the status of the package
// comment and a one-line text body.
func (r *Receiver) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, ok := r.readBody(w, req)
		if !ok {
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		res := r.Handle(req.Context(), r.now(), Request{Headers: webhook.HeadersOf(req.Header), Body: body},
			func(ctx context.Context, ev Event) error {
				in := req.WithContext(context.WithValue(ctx, eventKey{}, ev))
				in.Body = io.NopCloser(bytes.NewReader(body))
				next.ServeHTTP(sw, in)
				if sw.status != 0 && (sw.status < 200 || sw.status > 299) {
					return fmt.Errorf("handler answered %d", sw.status)
				}
				return nil
			})
		if sw.status != 0 {
			return // next answered
		}
		if res.Outcome == Handled {
			w.WriteHeader(http.StatusOK) // next wrote nothing
			return
		}
		reply(w, res)
	})
}

// Handler serves h behind the receiver: 200 when h succeeds, 500 when it
// fails, and the package comment's statuses otherwise.
func (r *Receiver) Handler(h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, ok := r.readBody(w, req)
		if !ok {
			return
		}
		res := r.Handle(req.Context(), r.now(), Request{Headers: webhook.HeadersOf(req.Header), Body: body}, h)
		if res.Outcome == Handled {
			w.WriteHeader(http.StatusOK)
			return
		}
		reply(w, res)
	})
}

func (r *Receiver) readBody(w http.ResponseWriter, req *http.Request) ([]byte, bool) {
	body, err := readall.Sized(http.MaxBytesReader(w, req.Body, r.maxBody), req.ContentLength, r.maxBody)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "body larger than "+strconv.FormatInt(r.maxBody, 10)+" bytes", http.StatusRequestEntityTooLarge)
		} else {
			http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		}
		return nil, false
	}
	return body, true
}

func reply(w http.ResponseWriter, res Result) {
	switch res.Outcome {
	case Duplicate:
		w.WriteHeader(res.Status)
		return
	case Busy, Unavailable:
		w.Header().Set("Retry-After", "1")
	}
	msg := res.Reason
	if msg == "" {
		msg = http.StatusText(res.Status)
	}
	// Internal errors (handler, store) stay in the receiver; the sender
	// learns only the class.
	http.Error(w, msg, res.Status)
}

// statusWriter records the status next answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
