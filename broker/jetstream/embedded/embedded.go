// Package embedded runs a NATS server with JetStream inside the process,
// listening on 127.0.0.1 only: the zero-setup broker of inboxctl's demo and
// of "embedded" broker URLs, and the server tests run broker/jetstream
// against. It needs no installation.
//
//	srv, err := embedded.Start(dir)
//	...
//	defer srv.Shutdown()
//	a, err := jetstream.Open(ctx, jetstream.Config{URL: srv.URL(), Subject: "invoice.events"})
//
// It is a package of its own, apart from broker/jetstream, so that a
// program that only connects to a NATS server does not link the server
// (github.com/nats-io/nats-server).
package embedded

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is a NATS server with JetStream running in this process.
type Server struct {
	s    *server.Server
	dir  string
	port int
	url  string
}

// Start starts a NATS server with JetStream in this process, with its file
// store in dir, listening on 127.0.0.1 on a random free port, and returns
// once it accepts connections. Streams survive a restart on the same dir.
func Start(dir string) (*Server, error) {
	if dir == "" {
		return nil, errors.New("embedded: Start needs a store directory")
	}
	e := &Server{dir: dir}
	s, err := start(dir, server.RANDOM_PORT)
	if err != nil {
		return nil, err
	}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		shutdown(s)
		return nil, fmt.Errorf("embedded: server listens on %v, not a TCP address", s.Addr())
	}
	e.s, e.port, e.url = s, addr.Port, s.ClientURL()
	return e, nil
}

func start(dir string, port int) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		ServerName: "inboxkit-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
		HTTPPort:   0, // no monitoring endpoint
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: NATS server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		shutdown(s)
		return nil, errors.New("embedded: NATS server not ready after 10s")
	}
	if !s.JetStreamEnabled() {
		shutdown(s)
		return nil, errors.New("embedded: NATS server started without JetStream")
	}
	return s, nil
}

func shutdown(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// URL returns the client URL, nats://127.0.0.1:<port>. It stays the same
// across Restart.
func (e *Server) URL() string { return e.url }

// Shutdown stops the server and waits until it has stopped. It is safe to
// call more than once.
func (e *Server) Shutdown() { shutdown(e.s) }

// Restart starts the server again after Shutdown, on the same port and
// store directory, for tests of a broker outage: clients reconnect to the
// same URL and find their streams. It must not run concurrently with the
// other methods.
func (e *Server) Restart() error {
	s, err := start(e.dir, e.port)
	if err != nil {
		return fmt.Errorf("embedded: restart on port %d: %w", e.port, err)
	}
	e.s = s
	return nil
}
