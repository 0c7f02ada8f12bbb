//go:build godror

// Built with -tags godror, inboxctl also opens godror://user:pass@host:port/service
// with github.com/godror/godror, which needs cgo and Oracle's client
// libraries (Instant Client) at run time:
//
//	CGO_ENABLED=1 go build -tags godror -o inboxctl ./cmd/inboxctl
//
// oracle:// (the pure-Go go-ora driver) works in every build.
package main

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	_ "github.com/godror/godror" // database/sql driver "godror"

	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
)

func init() {
	target.GodrorDSN = func(u *url.URL) (string, error) {
		service := strings.Trim(u.Path, "/")
		if u.Hostname() == "" || service == "" || u.User == nil {
			return "", fmt.Errorf("use godror://user:pass@host:1521/service")
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "1521")
		}
		pw, _ := u.User.Password()
		q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
		return fmt.Sprintf("user=%s password=%s connectString=%s", q(u.User.Username()), q(pw), q(host+"/"+service)), nil
	}
}
