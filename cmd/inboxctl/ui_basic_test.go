package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, PEM, into
// dir and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "inboxctl ui test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

// Basic auth over TLS instead of the token: off loopback the console
// starts with --tls-cert, --tls-key and --basic-auth-file, serves HTTPS
// only, answers 401 with a Basic challenge without a user or with a wrong
// password, records the user as the operator (plain and sha256: lines),
// and still needs the CSRF token on a POST. Basic auth without TLS, half
// a key pair and a malformed file are refused naming the fix.
func TestConsoleBasicAuthTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sqlite := "sqlite:" + filepath.Join(dir, "i.db")
	wantCode(t, inboxctl(t, "", "migrate", "--db", sqlite), 0)
	cert, key, pool := selfSigned(t, dir)
	users := filepath.Join(dir, "users")
	sum := sha256.Sum256([]byte("bob-password"))
	if err := os.WriteFile(users, []byte("# operators\nann:ann-password\nbob:sha256:"+hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("ann\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ui := func(args ...string) result {
		return inboxctl(t, "", append([]string{"ui", "--db", sqlite}, args...)...)
	}
	wantCode(t, ui("--listen", "0.0.0.0:16399", "--basic-auth-file", users), 2, "--basic-auth-file needs --tls-cert and --tls-key")
	wantCode(t, ui("--listen", "0.0.0.0:16399", "--tls-cert", cert), 2, "--tls-cert and --tls-key go together")
	wantCode(t, ui("--listen", "0.0.0.0:16399", "--tls-cert", cert, "--tls-key", key), 2, "not a loopback address", "--basic-auth-file")
	wantCode(t, ui("--listen", "0.0.0.0:16399", "--tls-cert", cert, "--tls-key", key, "--basic-auth-file", bad), 2, "line 1: give USER:PASSWORD")
	wantCode(t, ui("--tls-cert", key, "--tls-key", key), 2, "give a PEM certificate")

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	_, logs := startCommand(ctx, t, "ui", "--db", sqlite, "--listen", "0.0.0.0:0", "--tls-cert", cert, "--tls-key", key, "--basic-auth-file", users, "--operator", "proc")
	re := regexp.MustCompile(`serving the console at https://[^\s]*:(\d+)/`)
	var port string
	waitFor(t, "the console's address in its log", func() bool {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			port = m[1]
		}
		return port != ""
	}, logs)
	base := "https://127.0.0.1:" + port
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path, user, pass string, h http.Header, body string) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range h {
			req.Header[k] = vs
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	for _, tc := range []struct{ path, user, pass string }{{"/", "", ""}, {"/api/stats", "", ""}, {"/api/stats", "ann", "wrong"}, {"/api/stats", "eve", "ann-password"}} {
		code, body, h := do("GET", tc.path, tc.user, tc.pass, nil, "")
		wantStatus(t, "GET "+tc.path+" as "+tc.user, code, 401, body)
		if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("GET %s: no Basic challenge: %q", tc.path, h.Get("WWW-Authenticate"))
		}
	}
	for user, pass := range map[string]string{"ann": "ann-password", "bob": "bob-password"} {
		code, body, _ := do("GET", "/api/session", user, pass, nil, "")
		wantStatus(t, "GET /api/session as "+user, code, 200, body)
		var s struct{ Operator, CSRFToken string }
		if err := json.Unmarshal([]byte(body), &s); err != nil || s.Operator != user || s.CSRFToken == "" {
			t.Fatalf("session of %s: %v %s", user, err, body)
		}
		code, body, _ = do("GET", "/", user, pass, nil, "")
		wantStatus(t, "GET / as "+user, code, 200, body)
		code, body, _ = do("POST", "/api/dlq/replay", user, pass, http.Header{"Content-Type": {"application/json"}}, `{"all":true}`)
		wantStatus(t, "POST without the CSRF token as "+user, code, 403, body)
		code, body, _ = do("POST", "/api/dlq/replay", user, pass, http.Header{"Content-Type": {"application/json"}, "X-Csrf-Token": {s.CSRFToken}}, `{"all":true}`)
		wantStatus(t, "POST with the CSRF token as "+user+" (no broker: a usage error)", code, 400, body)
	}
	// Plain HTTP to the port is not served.
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://127.0.0.1:" + port + "/api/stats")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP got %d", resp.StatusCode)
		}
	}
}
