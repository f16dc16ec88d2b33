package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// DSNHint is what a user can do about a server that cannot be reached: the
// environment variable the tests read and the CLI flag.
const DSNHint = "start PostgreSQL or set DELIVERYSIM_PG_DSN / --dsn to a reachable server"

// ConnError is a failure to reach, or to log in to, a PostgreSQL server,
// worded as one line for a user instead of a stack of driver errors. The
// driver's error stays reachable with errors.Unwrap.
type ConnError struct {
	Addr     string // host:port or unix socket path, as the DSN names it
	Reason   string // short cause: "connection refused", "timed out", ...
	Rejected bool   // the server answered but refused the login or database
	Invalid  bool   // the DSN itself could not be parsed
	Err      error
}

func (e *ConnError) Error() string {
	switch {
	case e.Invalid:
		return fmt.Sprintf("invalid postgres DSN (%s): set DELIVERYSIM_PG_DSN / --dsn to a URL like postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", e.Reason)
	case e.Rejected:
		return fmt.Sprintf("postgres at %s rejected the connection (%s): fix the user, password or database in DELIVERYSIM_PG_DSN / --dsn", e.Addr, e.Reason)
	default:
		return fmt.Sprintf("postgres unreachable at %s (%s): %s", e.Addr, e.Reason, DSNHint)
	}
}

func (e *ConnError) Unwrap() error { return e.Err }

// DescribeConnError turns err, returned while connecting to dsn, into a
// *ConnError whose message is one actionable line. Errors that are not about
// connecting (a failing query, say) are returned unchanged, and so is nil.
// The CLI uses it to report a bad --dsn the same way the store does.
func DescribeConnError(dsn string, err error) error {
	if err == nil {
		return nil
	}
	var ce *ConnError
	if errors.As(err, &ce) {
		return ce
	}
	var parseErr *pgconn.ParseConfigError
	if errors.As(err, &parseErr) {
		return &ConnError{Invalid: true, Reason: oneLine(parseErr.Error()), Err: err}
	}
	var connectErr *pgconn.ConnectError
	if !errors.As(err, &connectErr) && !isNetError(err) {
		return err
	}
	out := &ConnError{Addr: addrOf(dsn, connectErr), Err: err}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// The server is up and said no: wrong password, role or database.
		out.Rejected = true
		out.Reason = fmt.Sprintf("%s, SQLSTATE %s", pgErr.Message, pgErr.Code)
		return out
	}
	out.Reason = reasonOf(err)
	return out
}

func isNetError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr)
}

// addrOf names the server the way the user wrote it. The connect error's
// config is preferred because it already has defaults (PGHOST, port 5432)
// applied.
func addrOf(dsn string, connectErr *pgconn.ConnectError) string {
	var cfg *pgconn.Config
	if connectErr != nil && connectErr.Config != nil {
		cfg = connectErr.Config
	} else if parsed, err := pgconn.ParseConfig(dsn); err == nil {
		cfg = parsed
	}
	if cfg == nil {
		return "the configured server"
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

func reasonOf(err error) string {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ENOENT), errors.Is(err, os.ErrNotExist):
		return "no such socket"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "unknown host " + dnsErr.Name
		}
		return "cannot resolve " + dnsErr.Name
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	if isTimeout(err) {
		return "timed out"
	}
	// Unknown cause: keep the innermost message, which is the most specific.
	inner := err
	for {
		next := errors.Unwrap(inner)
		if next == nil {
			break
		}
		inner = next
	}
	return oneLine(inner.Error())
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
