package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/deliverysim/deliverysim/impl/pgstore"
)

// closedPort returns a local TCP port with nothing listening on it.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestOpenUnreachableIsOneLine(t *testing.T) {
	port := closedPort(t)
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := pgstore.Open(ctx, dsn, pgstore.Options{Migrate: true})
	if err == nil {
		s.Close()
		t.Fatalf("Open on a closed port succeeded")
	}
	want := fmt.Sprintf("postgres unreachable at 127.0.0.1:%d (connection refused): start PostgreSQL or set DELIVERYSIM_PG_DSN / --dsn to a reachable server", port)
	if err.Error() != want {
		t.Errorf("Open error:\n got %q\nwant %q", err, want)
	}
	var ce *pgstore.ConnError
	if !errors.As(err, &ce) || ce.Unwrap() == nil {
		t.Errorf("Open error is %T, want *pgstore.ConnError wrapping the driver error", err)
	}
	if err := pgstore.Migrate(ctx, dsn, "x"); err == nil || err.Error() != want {
		t.Errorf("Migrate error:\n got %v\nwant %q", err, want)
	}
}

func TestDescribeConnErrorInvalidDSN(t *testing.T) {
	ctx := context.Background()
	_, err := pgstore.Open(ctx, "postgres://user:secret@host:notaport/db", pgstore.Options{})
	if err == nil {
		t.Fatal("Open accepted a DSN with a non-numeric port")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "invalid postgres DSN (") || strings.Contains(msg, "\n") {
		t.Errorf("got %q, want one line starting with %q", msg, "invalid postgres DSN (")
	}
	if strings.Contains(msg, "secret") {
		t.Errorf("the error leaks the password: %q", msg)
	}
}

func TestDescribeConnErrorLeavesOtherErrorsAlone(t *testing.T) {
	other := errors.New("relation does not exist")
	if got := pgstore.DescribeConnError("postgres://x", other); got != other {
		t.Errorf("got %v, want the error unchanged", got)
	}
	if pgstore.DescribeConnError("postgres://x", nil) != nil {
		t.Error("nil error became non-nil")
	}
}
