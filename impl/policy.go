package impl

// PermanentStatus is the delivery policy for a webhook answered with a
// non-2xx status (seed 001 asks for retries with backoff and a dead-letter
// queue for what retrying cannot fix; it does not say which is which, so
// this is the policy, shared by the reference engine and the checker). A
// client error that the same request can never get past is permanent and
// dead-letters the message at once, after one attempt: 400 Bad Request,
// 404 Not Found, 405 Method Not Allowed, 410 Gone, 413 Content Too Large,
// 415 Unsupported Media Type, 422 Unprocessable Content. Every other status
// is retried with backoff up to MaxAttempts: 5xx, and the client errors
// that say "not now" or that an operator fixes without changing the
// request: 401 and 403 (a key or permission being rotated), 408 Request
// Timeout, 409 Conflict, 425 Too Early, 429 Too Many Requests, and any
// other 4xx. An operator requeues a dead letter once the endpoint is fixed.
func PermanentStatus(status int) bool {
	switch status {
	case 400, 404, 405, 410, 413, 415, 422:
		return true
	}
	return false
}
