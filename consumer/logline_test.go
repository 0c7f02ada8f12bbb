package consumer

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/inbox"
)

// The line per settlement costs nothing when the logger drops its level
// (debug, the default drops it): it is built only to be written. A dead
// letter's line (warn) is written at info, with its attributes.
func TestLogLineBuiltOnlyWhenWritten(t *testing.T) {
	var buf bytes.Buffer
	c := &Consumer{cfg: Config{Name: "c", Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}}
	processed := Settled{Message: inboxkit.Message{ID: "E-1", CorrelationID: "C-1"}, Action: inboxkit.ActionAck,
		Result: inbox.Result{Outcome: inboxkit.OutcomeProcessed, Status: inboxkit.StatusProcessed, Attempts: 1}}
	if n := testing.AllocsPerRun(100, func() { c.logLine(processed) }); n != 0 {
		t.Errorf("a debug line the logger drops: %v allocations, want 0", n)
	}
	if buf.Len() != 0 {
		t.Errorf("a debug line written at info: %q", buf.String())
	}
	dead := Settled{Message: inboxkit.Message{ID: "E-2", CorrelationID: "C-2"}, Action: inboxkit.ActionDeadLetter,
		Result: inbox.Result{Outcome: inboxkit.OutcomeDeadLetter, Status: inboxkit.StatusDeadLettered, Reason: "bad json", Attempts: 1, Err: errors.New("unexpected end")}}
	c.logLine(dead)
	line := buf.String()
	for _, want := range []string{"level=WARN", "msg=settled", "consumer=c", "event_id=E-2", "correlation_id=C-2", "action=dead-letter", "outcome=DEAD_LETTER", "reason=\"bad json\"", "attempts=1", "error=\"unexpected end\""} {
		if !strings.Contains(line, want) {
			t.Errorf("dead letter's line %q lacks %s", line, want)
		}
	}
}
