package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamExists reports whether the stream exists on the server at url. It
// only looks the stream up (an Adapter with Config.Stream creates it, so a
// tool that only looks at a stream, such as a dead-letter listing, asks this
// first).
func StreamExists(ctx context.Context, url, stream string) (bool, error) {
	nc, err := nats.Connect(url, nats.Name("inboxkit-lookup"))
	if err != nil {
		return false, fmt.Errorf("jetstream: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, fmt.Errorf("jetstream: %w", err)
	}
	_, err = js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("jetstream: look up stream %s: %w", stream, err)
	}
	return true, nil
}
