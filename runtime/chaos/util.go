// Small helpers: loopback servers, DSN rewriting, the run's schema, sleeps and log tails.

package chaos

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/deliverysim/deliverysim/impl/pgstore"
	"github.com/deliverysim/deliverysim/runtime/protocol"
	"github.com/deliverysim/deliverysim/runtime/protoserver"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func serveHTTP(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

func pgTarget(dsn string) (string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("the Postgres DSN does not parse: %v", err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// withHost points a postgres:// URL DSN at addr.
func withHost(dsn, addr string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("chaos needs a URL DSN (postgres://user@host:port/db?sslmode=disable) to route the engine through its proxy; got %q", dsn)
	}
	u.Host = addr
	return u.String(), nil
}

func createSchema(ctx context.Context, dsn, schema string) error {
	c, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(c, dsn)
	if err != nil {
		return pgstore.DescribeConnError(dsn, err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(c, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func tail(path string, n int) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

// serveProtocol starts the harness's upstream and registry on loopback,
// the upstream telling the recorder of every event it serves; stop ends
// both.
func (h *harness) serveProtocol() (upURL, regURL string, stop func(), err error) {
	h.up, h.reg = protoserver.NewUpstream(), protoserver.NewRegistry()
	h.up.Registry = h.reg
	h.up.OnServe = func(_ string, evs []protocol.Event) {
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		h.rec.arrived(ids)
		h.aimed(aimUpstream)
	}
	// Each opening fetch is recorded before the upstream answers it
	// (resume-from-cursor judges where a new process starts).
	up := http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if rest, ok := strings.CutPrefix(q.URL.Path, protocol.PathEvents); ok {
			if stream, tail, ok := strings.Cut(rest, "/"); ok && tail == "events" {
				h.rec.fetched(stream, q.URL.Query())
			}
		}
		if h.snap != nil && strings.HasPrefix(q.URL.Path, protocol.PathRepos) {
			h.snap.repos.ServeHTTP(w, q)
			return
		}
		h.up.ServeHTTP(w, q)
	})
	upURL, stopUp, err := serveHTTP(up)
	if err != nil {
		return "", "", nil, err
	}
	regURL, stopReg, err := serveHTTP(h.reg)
	if err != nil {
		stopUp()
		return "", "", nil, err
	}
	return upURL, regURL, func() { stopReg(); stopUp() }, nil
}

// dropSchema drops a run's schema on its own short deadline: it runs after
// the run's context may already be cancelled (SIGINT).
func dropSchema(dsn, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgstore.DropSchema(ctx, dsn, schema); err != nil {
		return fmt.Errorf("dropping schema %s: %w", schema, err)
	}
	return nil
}

// The temp folders a run and a smoke check make under the system temp
// folder; gc (cmd/deliverysim) removes those a SIGKILLed chaos left.
const (
	TempPrefixRun   = "deliverysim-chaos-"
	TempPrefixSmoke = "deliverysim-smoke-"
)

// workDir makes a run's temp folder (named so gc finds it after a SIGKILL)
// and the engine's log in it; done closes the log and removes the folder.
func workDir(prefix string) (dir string, log *os.File, done func(), err error) {
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", nil, nil, err
	}
	if log, err = os.Create(filepath.Join(dir, "engine.log")); err != nil {
		os.RemoveAll(dir)
		return "", nil, nil, err
	}
	return dir, log, func() { log.Close(); os.RemoveAll(dir) }, nil
}
