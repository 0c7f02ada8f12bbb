package jetstream

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Embedded is a NATS server with JetStream running inside this process,
// listening on 127.0.0.1 only. It needs no installation: the CLI's
// zero-setup demo uses it.
type Embedded struct {
	s *server.Server
}

// StartEmbedded starts a NATS server with JetStream in this process, with
// its file store in dir, listening on 127.0.0.1 on a random free port, and
// returns once it accepts connections. Streams survive a restart on the
// same dir.
func StartEmbedded(dir string) (*Embedded, error) {
	return startEmbedded(dir, server.RANDOM_PORT)
}

func startEmbedded(dir string, port int) (*Embedded, error) {
	if dir == "" {
		return nil, errors.New("jetstream: StartEmbedded needs a store directory")
	}
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
		return nil, fmt.Errorf("jetstream: embedded server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, errors.New("jetstream: embedded server not ready after 10s")
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, errors.New("jetstream: embedded server started without JetStream")
	}
	return &Embedded{s: s}, nil
}

// URL returns the client URL, nats://127.0.0.1:<port>.
func (e *Embedded) URL() string { return e.s.ClientURL() }

// Shutdown stops the server and waits until it has stopped.
func (e *Embedded) Shutdown() {
	e.s.Shutdown()
	e.s.WaitForShutdown()
}
