package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"os"
	"strings"
)

// basicUsers are the users of --basic-auth-file: name -> the SHA-256 of
// the password (a plain password in the file is hashed when read, so both
// forms compare in constant time).
type basicUsers map[string][sha256.Size]byte

// check tells whether user's password is pass.
func (u basicUsers) check(user, pass string) bool {
	want, ok := u[user]
	got := sha256.Sum256([]byte(pass))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1 && ok
}

// consoleTLS reads --tls-cert, --tls-key and --basic-auth-file: the TLS
// configuration (nil: plain HTTP) and the users (nil: no basic auth).
// Basic auth needs TLS: its passwords travel in every request.
func consoleTLS(cert, key, basicFile string) (*tls.Config, basicUsers, error) {
	if (cert == "") != (key == "") {
		return nil, nil, usageErr("--tls-cert and --tls-key go together: give both PEM files (the certificate and its private key)")
	}
	if basicFile != "" && cert == "" {
		return nil, nil, usageErr("--basic-auth-file needs --tls-cert and --tls-key: basic auth sends the password with every request, so the console serves it over HTTPS only")
	}
	var conf *tls.Config
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, nil, usageErr("--tls-cert %s --tls-key %s: %v\n\tgive a PEM certificate and its PEM private key", cert, key, err)
		}
		conf = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	if basicFile == "" {
		return conf, nil, nil
	}
	b, err := os.ReadFile(basicFile)
	if err != nil {
		return nil, nil, usageErr("--basic-auth-file: %v", err)
	}
	users := basicUsers{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, pass, ok := strings.Cut(line, ":")
		if !ok || name == "" || pass == "" {
			return nil, nil, usageErr("--basic-auth-file %s, line %d: give USER:PASSWORD or USER:sha256:HEX (the SHA-256 of the password in hex: 'printf %%s PASSWORD | sha256sum')", basicFile, n)
		}
		sum := sha256.Sum256([]byte(pass))
		if h, ok := strings.CutPrefix(pass, "sha256:"); ok {
			raw, err := hex.DecodeString(h)
			if err != nil || len(raw) != sha256.Size {
				return nil, nil, usageErr("--basic-auth-file %s, line %d: sha256: takes 64 hex digits ('printf %%s PASSWORD | sha256sum')", basicFile, n)
			}
			copy(sum[:], raw)
		}
		users[name] = sum
	}
	if len(users) == 0 {
		return nil, nil, usageErr("--basic-auth-file %s holds no user: give lines USER:PASSWORD or USER:sha256:HEX", basicFile)
	}
	return conf, users, nil
}
