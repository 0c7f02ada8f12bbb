package consumer

import "github.com/inboxkit/inboxkit/inbox"

// ports are where the consumer's store publishes: Config.DeadLetter to
// DeadLetterQueue, Config.Rejects to RejectQueue, envelopes stamped by
// Config.Clock. The store publishes by its letter protocol, the same in
// both modes (inbox.Store.WithPorts); the consumer publishes nothing
// itself.
func (c *Consumer) ports() inbox.Ports {
	return inbox.Ports{
		DeadLetters: c.cfg.DeadLetter, DeadLetterQueue: c.cfg.DeadLetterQueue,
		Rejects: c.cfg.Rejects, RejectQueue: c.cfg.RejectQueue,
		Clock: c.cfg.Clock,
	}
}
