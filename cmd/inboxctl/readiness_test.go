package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// `run --metrics-addr`: /readyz's "broker" check is the consuming adapter's
// own connection state. With the broker behind a proxy that cuts every
// connection and then accepts and drops new ones (as a load balancer in
// front of a dead broker does, which a TCP dial takes for a live broker),
// /readyz turns 503 naming the broker, and 200 again once the adapter has
// reconnected by itself.
func TestRunReadinessFollowsTheBroker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, addr, url string }{
		{"activemq", stompAddr, "stomp://%s"},
		{"rabbitmq", "127.0.0.1:5672", "amqp://guest:guest@%s/"},
		{"jetstream", "127.0.0.1:4222", "nats://%s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			px := tcpproxy.Start(t, tc.addr)
			db := "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")
			wantCode(t, inboxctl(t, "", "migrate", "--db", db, "--seed-customers"), 0, "migrated")
			queue := fmt.Sprintf("inboxctl.readiness.%s.%d", tc.name, time.Now().UnixNano())
			t.Cleanup(func() { dropQueue(t, fmt.Sprintf(tc.url, tc.addr), queue) }) // after the run stops

			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, logs := startRun(ctx, t, "--db", db, "--broker", fmt.Sprintf(tc.url, px.Addr()),
				"--queue", queue, "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
			base := metricsBase(t, logs)

			var code int
			var body string
			readyz := func() bool { code, body = httpGet(t, base+"/readyz"); return code == http.StatusOK }
			waitFor(t, "/readyz 200 once consuming", readyz, dump(func() string { return body + "\n" + logs.String() }))
			t.Logf("before the cut: %d %s", code, body)
			px.Cut()
			waitFor(t, "/readyz 503 while the broker is cut off", func() bool { return !readyz() }, dump(func() string { return body }))
			t.Logf("during the cut: %d %s", code, body)
			for _, c := range wantOnlyFailing(t, body, "broker") {
				if strings.Contains(c.Error, "guest:guest") {
					t.Errorf("check %s shows the password: %s", c.Name, c.Error)
				}
			}
			px.Restore()
			waitFor(t, "/readyz 200 after the cut", readyz, dump(func() string { return body + "\n" + logs.String() }))
			t.Logf("after the cut: %d %s", code, body)
		})
	}
}
