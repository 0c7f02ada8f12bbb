package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/inbox"
)

// operatorFlag is --operator of a command that changes state: who is
// recorded in inbox.ActionTable.
type operatorFlag struct{ name string }

func (o *operatorFlag) register(c *cobra.Command) {
	c.Flags().StringVar(&o.name, "operator", "", "who does this, as recorded in "+inbox.ActionTable+" (default $USER, then the login name)")
}

// who is --operator, else $USER, else the login name of the process, else
// "unknown".
func (o operatorFlag) who() string {
	if o.name != "" {
		return o.name
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

// recorded writes the action (done already) into inbox.ActionTable through
// record; a failure is exit 1 that says the action itself was done.
func recorded(ctx context.Context, stderr io.Writer, a inbox.Action, record func(context.Context, inbox.Action) error) error {
	if err := record(ctx, a); err != nil {
		fmt.Fprintf(stderr, "inboxctl: the %s was done but not recorded: %v\n", a.Action, err)
		return errFindings
	}
	return nil
}
