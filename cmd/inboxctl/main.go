// Command inboxctl runs, operates and demonstrates inboxkit: a zero-setup
// demo, the invoice consumer, schema migration, publishing test events,
// audit by correlation id, the dead-letter queue, retention and consistency
// checks.
//
// Exit codes: 0 ok, 1 findings or failed verification, 2 usage or
// configuration error, 130 interrupted (SIGINT, Ctrl-C), 143 terminated
// (SIGTERM) — except run, which exits 0 once SIGTERM drained it. Run
// `inboxctl --help` for the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/inboxkit/inboxkit/cmd/inboxctl/internal/target"
)

// Exit codes.
const (
	exitOK       = 0
	exitFindings = 1
	exitUsage    = 2
	// exitInterrupted is the exit code of a command stopped by SIGINT
	// (Ctrl-C), whatever it was doing: 128 + the signal's number, as a
	// shell reports it.
	exitInterrupted = 130
	// exitTerminated is the exit code of a command that SIGTERM stopped
	// before it finished (run drains and exits 0 instead).
	exitTerminated = 143
)

// exitError carries an exit code. A nil err with code 1 means "findings
// already printed".
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// errFindings is returned by commands that printed findings.
var errFindings = &exitError{code: exitFindings}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, sig, stop := signalContext(stderr)
	defer stop()
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	code, err := interruptedCode(sig(), err)
	if err != nil {
		fmt.Fprintln(stderr, "inboxctl: "+target.Scrub(err.Error()))
	}
	return code
}

// interruptedCode is the exit code, and the error to print, of a command
// that returned err after the signal s (nil: none came). SIGINT is
// exitInterrupted whatever the command returned (Ctrl-C means "stop", not
// "something failed"). After SIGTERM a command that finished cleanly (run,
// drained) exits 0, one that stopped half-way exitTerminated, and one that
// failed on its own (run's shutdown timeout) keeps its code. An error that
// only says the context was cancelled becomes "interrupted": the database
// was not unreachable, the command was stopped.
func interruptedCode(s os.Signal, err error) (int, error) {
	stopped := errors.Is(err, context.Canceled) || codeOf(err) == exitInterrupted
	if stopped || (s == os.Interrupt && err == nil) {
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitInterrupted { // its own words (publish: what was confirmed)
			err = fmt.Errorf("interrupted by %s", signalName(s))
		}
	}
	switch {
	case s == os.Interrupt:
		return exitInterrupted, err
	case s == syscall.SIGTERM && stopped:
		return exitTerminated, err
	case err == nil:
		return exitOK, nil
	}
	return exitCode(err)
}

// codeOf is the exit code of err (0 for nil).
func codeOf(err error) int {
	if err == nil {
		return exitOK
	}
	code, _ := exitCode(err)
	return code
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return "a signal"
}

// exitCode is the exit code of a command's error, and the error to print
// (nil: the findings are printed already). It goes by the error's type,
// never its text: usage errors are exitError (our own, and cobra's flag,
// argument and unknown-command errors, which newRoot wraps) or
// target.UsageError; anything else is exit 1.
func exitCode(err error) (int, error) {
	var ee *exitError
	var ue *target.UsageError
	switch {
	case errors.As(err, &ee):
		if ee.err == nil {
			return ee.code, nil
		}
		return ee.code, err
	case errors.As(err, &ue):
		return exitUsage, err
	}
	return exitFindings, err
}

// signalContext returns a context cancelled by the first SIGINT or SIGTERM
// (commands then finish what they hold: run drains) and a function that
// returns that signal (nil before one came); a second signal exits the
// process at once, with exitInterrupted when it is SIGINT, else
// exitTerminated.
func signalContext(stderr io.Writer) (context.Context, func() os.Signal, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var first atomic.Value // os.Signal
	go func() {
		select {
		case s := <-sigs:
			first.Store(s)
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(stderr, "inboxctl: second signal (%s): exiting at once; messages in hand were not acknowledged and come again from the broker\n", signalName(s))
			code := exitTerminated
			if s == os.Interrupt {
				code = exitInterrupted
			}
			os.Exit(code)
		case <-done:
		}
	}()
	got := func() os.Signal {
		s, _ := first.Load().(os.Signal)
		return s
	}
	return ctx, got, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "inboxctl",
		Short: "Run, operate and demonstrate inboxkit idempotent consumers",
		Long: `inboxctl runs the inboxkit invoice consumer and operates its inbox table:
audit by correlation id, the dead-letter queue, retention and consistency checks.

Databases (--db, or INBOXKIT_DB):
  postgres://user@host:5432/db?sslmode=disable
  mysql://user:pass@host:3306/db            (MariaDB too)
  sqlite:PATH                               (pure Go, no server)
  oracle://user:pass@host:1521/service      (pure Go driver; not tested live here)
  godror://user:pass@host:1521/service      (only when built with -tags godror, cgo)

Brokers (--broker, or INBOXKIT_BROKER):
  stomp://[login:passcode@]host:61613       ActiveMQ Classic; a master/slave pair: stomp://h1:61613,h2:61613
  amqp://user:pass@host:5672/               RabbitMQ (AMQP 0-9-1)
  amqp10://user:pass@host:5672              AMQP 1.0: IBM MQ AMQP channel, Artemis, Service Bus,
                                            RabbitMQ's plugin (amqp10s:// for TLS)
  nats://host:4222                          NATS JetStream; a cluster: every node, and the
                                            streams' replicas: nats://h1:4222,h2:4222,h3:4222?replicas=3
  embedded[:DIR]                            JetStream inside this process

Exit codes: 0 ok, 1 findings or failed verification, 2 usage or configuration error,
130 interrupted by SIGINT (Ctrl-C), 143 stopped by SIGTERM (run: 0 once drained).
Passwords never appear in the output.`,
		Example: `  go run ./cmd/inboxctl demo
  inboxctl migrate --db postgres://postgres@127.0.0.1:5432/test?sslmode=disable`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// An unknown command is a usage error of the root's arguments (cobra
	// would return an untyped error): with Args set, cobra leaves them to
	// it, and RunE prints the help when there are none.
	root.Args = unknownCommand
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%v\n\trun '%s --help' for the flags and an example", err, c.CommandPath())
	})
	root.AddCommand(newDemoCmd(), newMigrateCmd(), newRunCmd(), newPublishCmd(), newAuditCmd(),
		newDLQCmd(), newPurgeCmd(), newCheckCmd(), newGoldenCmd(), newStatsCmd(), newMQCmd(), newVersionCmd(),
		newRelayCmd(), newOutboxCmd(), newFailuresCmd(), newUICmd(), newShadowCmd(newShadowDiffCmd()), newCutoverCmd())
	for _, c := range root.Commands() {
		wrapArgs(c)
	}
	return root
}

// unknownCommand refuses arguments of the root command that name no
// command, with cobra's suggestions.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	hint := ""
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		hint = "\n\tdid you mean " + strings.Join(s, " or ") + "?"
	}
	return usageErr("unknown command %q for %q%s\n\trun 'inboxctl --help' for the commands", args[0], cmd.CommandPath(), hint)
}

// wrapArgs turns cobra's argument errors into usage errors (exit 2).
func wrapArgs(c *cobra.Command) {
	if c.Args != nil {
		check := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageErr("%v\n\trun '%s --help' for the usage and an example", err, cmd.CommandPath())
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
