//go:build !linux

package stomp

import "net"

// quickAcker is a no-op where TCP_QUICKACK does not exist; see
// quickack_linux.go.
type quickAcker struct{}

func newQuickAcker(net.Conn) *quickAcker { return nil }

func (q *quickAcker) ack() {}
