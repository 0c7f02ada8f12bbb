package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
	"github.com/inboxkit/inboxkit/inbox"
)

// defaultConsoleAddr is where 'inboxctl ui' listens unless told: loopback.
const defaultConsoleAddr = "127.0.0.1:9470"

func newUICmd() *cobra.Command {
	var f dbFlags
	var of outboxFlags
	var op operatorFlag
	var listen, tokenFile, brokerURL, dlqName, tlsCert, tlsKey, basicFile string
	var readyz []string
	c := &cobra.Command{
		Use:   "ui --db URL [--listen 127.0.0.1:9470] [--auth-token-file F | --tls-cert F --tls-key F --basic-auth-file F] [--broker URL --dlq NAME] [--readyz NAME=URL ...]",
		Short: "Serve the web console: overview, failure groups, messages, search, paced replay",
		Long: `ui serves the operator's web console: an overview (rows per consumer and status, the
dead-letter queue's depth, the outbox backlog, the consumers' readiness), the failure
groups, a page per message (its rows, the dead letter's headers and body, the operator
actions on it), search by correlation id, event id and business key (order key), and
replay of one dead letter or a failure group at a rate, after a confirmation. Each page
renders what the matching command prints with -o json, and /api/... returns that JSON
(docs/console-openapi.yaml); docs/console.md describes it.

It listens on loopback (--listen 127.0.0.1:9470) unless told otherwise; any other
address needs --auth-token-file: a file whose content (16 characters or more) every
request must carry, as 'Authorization: Bearer TOKEN' or through the login page; or
basic auth over TLS: --tls-cert and --tls-key (PEM files; the console serves HTTPS)
with --basic-auth-file, lines USER:PASSWORD or USER:sha256:HEX (the SHA-256 of the
password in hex), the user being the operator recorded. Every
POST also needs the console's CSRF token (the forms carry it; GET /api/session gives it
to API clients as X-CSRF-Token) and is refused when a browser says it comes from
another site. Replays are recorded in ` + inbox.ActionTable + ` with the operator: the
login name (with a token, or the basic-auth user), else the X-Operator header, else
--operator or $USER.

Replay needs --broker and --dlq (the dead-letter queue); without them the console
only reads. --readyz NAME=URL (repeatable) adds a consumer's /readyz to the overview
(inboxctl run --metrics-addr serves one). It runs until SIGTERM (exit 0) or Ctrl-C
(exit 130); a replay under way finishes first.`,
		Example: `  inboxctl ui --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
    --broker stomp://127.0.0.1:61613 --dlq DLQ.invoices --readyz invoice=http://127.0.0.1:9464/readyz
  inboxctl ui --db sqlite:./inbox.db --listen 0.0.0.0:9470 --auth-token-file /etc/inboxkit/console-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			tlsConf, users, err := consoleTLS(tlsCert, tlsKey, basicFile)
			if err != nil {
				return err
			}
			token, err := consoleToken(listen, tokenFile, users != nil)
			if err != nil {
				return err
			}
			targets, err := parseReadyz(readyz)
			if err != nil {
				return err
			}
			if dlqName != "" && orEnv(brokerURL, envBroker) == "" {
				return usageErr("--dlq %s needs --broker URL (or $%s): the console reads and replays the queue there", dlqName, envBroker)
			}
			st, t, err := f.openStoreForReading(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer st.DB().Close()
			var b *broker
			if dlqName != "" {
				if b, err = openLastingBroker(brokerURL, "ui"); err != nil {
					return err
				}
				defer b.Close()
			}
			con, err := newConsole(ctx, st, t, b, dlqName, of, targets, token, op.who())
			if err != nil {
				return err
			}
			con.users = users
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return usageErr("--listen %s: %v\n\tuse a free host:port, e.g. %s", listen, err, defaultConsoleAddr)
			}
			srv := &http.Server{Handler: con.handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf,
				BaseContext: func(net.Listener) context.Context { return ctx }}
			scheme := "http"
			if tlsConf != nil {
				scheme = "https"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "inboxctl ui: serving the console at %s://%s/ (database %s, operator %s); Ctrl-C ends\n",
				scheme, ln.Addr(), t.Display, con.operator)
			served := make(chan error, 1)
			go func() {
				if tlsConf != nil {
					served <- srv.ServeTLS(ln, "", "")
					return
				}
				served <- srv.Serve(ln)
			}()
			select {
			case err := <-served:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			con.wait()
			return nil
		},
	}
	f.register(c)
	f.registerAttempts(c)
	of.register(c)
	op.register(c)
	c.Flags().StringVar(&listen, "listen", defaultConsoleAddr, "address to serve on; other than loopback it needs --auth-token-file")
	c.Flags().StringVar(&tokenFile, "auth-token-file", "", "file holding the token every request must carry (required off loopback, unless --basic-auth-file)")
	c.Flags().StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	c.Flags().StringVar(&tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	c.Flags().StringVar(&basicFile, "basic-auth-file", "", "file of USER:PASSWORD or USER:sha256:HEX lines: basic auth (needs --tls-cert and --tls-key)")
	c.Flags().StringVar(&brokerURL, "broker", "", "broker URL of the dead-letter queue (default $"+envBroker+")")
	c.Flags().StringVar(&dlqName, "dlq", "", "dead-letter queue to show and replay from (needs --broker)")
	c.Flags().StringArrayVar(&readyz, "readyz", nil, "a consumer's readiness URL, NAME=URL (repeatable)")
	return c
}

// consoleToken reads the token of --auth-token-file, and refuses an
// address other than loopback without one (or basic auth over TLS).
func consoleToken(listen, file string, basic bool) (string, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", usageErr("--listen %q: %v\n\tgive host:port, e.g. %s", listen, err, defaultConsoleAddr)
	}
	if file == "" {
		if !loopbackHost(host) && !basic {
			return "", usageErr("--listen %s is not a loopback address: the console refuses to serve it without --auth-token-file FILE\n\t"+
				"(a file holding a token of 16 characters or more, e.g. 'head -c 32 /dev/urandom | base64 > FILE'),\n\t"+
				"or basic auth over TLS (--tls-cert F --tls-key F --basic-auth-file F), or listen on %s", listen, defaultConsoleAddr)
		}
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usageErr("--auth-token-file: %v", err)
	}
	token := strings.TrimSpace(string(b))
	if len(token) < 16 {
		return "", usageErr("--auth-token-file %s: the token has %d characters; give 16 or more (e.g. 'head -c 32 /dev/urandom | base64 > %s')", file, len(token), file)
	}
	return token, nil
}

// loopbackHost tells whether host (of --listen) is a loopback address;
// "" (every interface) is not.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readyzTarget is a consumer's /readyz the overview shows.
type readyzTarget struct{ name, url string }

func parseReadyz(vs []string) ([]readyzTarget, error) {
	var out []readyzTarget
	for _, v := range vs {
		name, url, ok := strings.Cut(v, "=")
		if !ok || name == "" || !(strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://")) {
			return nil, usageErr("--readyz %q: give NAME=URL, e.g. invoice=http://127.0.0.1:9464/readyz", v)
		}
		out = append(out, readyzTarget{name, url})
	}
	return out, nil
}

// readiness is a consumer's /readyz answer (GET /api/readiness).
type readiness struct {
	Name   string `json:"name"`
	URL    string `json:"url"`
	Ready  bool   `json:"ready"`
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"`
	Error  string `json:"error,omitempty"`
}

// console is the state of 'inboxctl ui': the store and broker it reads
// and replays through, its secrets, and the replays it ran.
type console struct {
	st       *inbox.Store
	t        target.DB
	b        *broker // nil: no --dlq, reading only
	dlq      string
	of       outboxFlags
	readyz   []readyzTarget
	token    string     // "" on loopback without --auth-token-file
	users    basicUsers // nil without --basic-auth-file
	csrf     string     // per process: the forms' hidden field, X-CSRF-Token
	operator string     // who a request is recorded as without a login or X-Operator
	ctx      context.Context
	pages    map[string]*template.Template
	client   *http.Client

	replayMu sync.Mutex // one replay at a time, as from one terminal: two never contend for the same dead letters
	jobsMu   sync.Mutex
	jobs     []*replayJob
	running  sync.WaitGroup
}

func newConsole(ctx context.Context, st *inbox.Store, t target.DB, b *broker, dlqName string, of outboxFlags, rz []readyzTarget, token, operator string) (*console, error) {
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	k := make([]byte, 24)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return &console{st: st, t: t, b: b, dlq: dlqName, of: of, readyz: rz, token: token, csrf: hex.EncodeToString(k),
		operator: operator, ctx: ctx, pages: pages, client: &http.Client{Timeout: 3 * time.Second}}, nil
}

// wait waits for the replays started from the forms.
func (c *console) wait() { c.running.Wait() }

const sessionCookie = "inboxctl_session"

// session is the cookie value of a login: the name, and a MAC of it under
// the token (so only who knows the token can make one).
func (c *console) session(name string) string {
	m := hmac.New(sha256.New, []byte(c.token))
	_, _ = io.WriteString(m, "inboxctl ui session\x00"+name) // a hash.Hash never fails to write
	return base64.RawURLEncoding.EncodeToString([]byte(name)) + "." + hex.EncodeToString(m.Sum(nil))
}

// login returns who made the request, and whether it may proceed: without
// a token or basic-auth users everyone may (the process operator, or
// X-Operator); with users, basic auth (the user); with a token,
// 'Authorization: Bearer TOKEN' (X-Operator, else the process operator)
// or a session cookie (its login name).
func (c *console) login(r *http.Request) (string, bool) {
	who := c.operator
	if h := strings.TrimSpace(r.Header.Get("X-Operator")); h != "" {
		who = h
	}
	if c.token == "" && c.users == nil {
		return who, true
	}
	if user, pass, ok := r.BasicAuth(); ok && c.users != nil {
		return user, c.users.check(user, pass)
	}
	if c.token == "" {
		return "", false // basic auth only: no bearer, no session (its MAC is keyed by the token)
	}
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return who, hmacEqual(bearer, c.token)
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", false
	}
	enc, _, _ := strings.Cut(ck.Value, ".")
	name, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(c.session(string(name)))) != 1 {
		return "", false
	}
	return string(name), true
}

// csrfOK checks a POST's CSRF token: the form field csrf or the header
// X-CSRF-Token (cross-site browser requests are refused before, by
// http.CrossOriginProtection).
func (c *console) csrfOK(r *http.Request) bool {
	got := r.Header.Get("X-CSRF-Token")
	if got == "" {
		got = r.PostFormValue("csrf")
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(c.csrf)) == 1
}

// handler is the console's HTTP handler: the routes behind the login and
// CSRF checks, with headers that keep pages out of frames and scripts
// to the console's own.
func (c *console) handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range c.routes() {
		mux.Handle(rt.pattern(), c.guard(rt))
	}
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "refused: a cross-site request cannot change the console's state (CSRF check)", http.StatusForbidden)
	}))
	h := cop.Handler(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
		h.ServeHTTP(w, r)
	})
}

// guard applies the login (except to the login page and static files)
// and, on a POST, the CSRF token.
func (c *console) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := rt.path == "/login" || strings.HasPrefix(rt.path, "/static/")
		who, ok := c.login(r)
		if !ok && !open {
			if c.users != nil { // the browser asks for the user and password
				w.Header().Set("WWW-Authenticate", `Basic realm="inboxctl ui", charset="UTF-8"`)
				if !rt.api() {
					http.Error(w, "unauthorized: log in with a user of the console's --basic-auth-file", http.StatusUnauthorized)
					return
				}
			}
			if rt.api() {
				msg := "unauthorized: send 'Authorization: Bearer TOKEN' (the content of --auth-token-file)"
				if c.token == "" {
					msg = "unauthorized: send basic auth, a user of the console's --basic-auth-file"
				}
				writeAPIError(w, http.StatusUnauthorized, errors.New(msg))
				return
			}
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost && !c.csrfOK(r) {
			msg := "refused: the CSRF token is missing or stale (reload the page; API clients send X-CSRF-Token from GET /api/session)"
			if rt.api() {
				writeAPIError(w, http.StatusForbidden, errors.New(msg))
			} else {
				http.Error(w, msg, http.StatusForbidden)
			}
			return
		}
		rt.h(w, r.WithContext(context.WithValue(r.Context(), operatorKey{}, who)))
	})
}

type operatorKey struct{}

// who is the operator a request is recorded as.
func who(r *http.Request) string {
	s, _ := r.Context().Value(operatorKey{}).(string)
	return s
}

// hmacEqual compares two secrets in constant time.
func hmacEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
