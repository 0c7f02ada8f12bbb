package golden_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/golden/goldentest"
)

// greeter is a tiny consumer: every message adds one row to greetings.
func greeter(env *golden.Env) (golden.Subject, error) {
	return golden.Subject{
		Name: "greeter",
		Setup: func(ctx context.Context) error {
			_, err := env.DB.ExecContext(ctx, `CREATE TABLE greetings (event_id VARCHAR(120) NOT NULL, text VARCHAR(200) NOT NULL)`)
			return err
		},
		Handler: func(ctx context.Context, tx *sql.Tx, m inboxkit.Message) error {
			_, err := tx.ExecContext(ctx, env.Dialect.Rebind(`INSERT INTO greetings (event_id, text) VALUES (?, ?)`), m.ID, string(m.Body))
			return err
		},
		Tables: []golden.Table{{Name: "greetings", Columns: []string{"event_id", "text"}}},
	}, nil
}

// Example_approvalTest shows a test (with package goldentest) that approves every case under
// testdata/golden: go test -run TestGreeter -update approves them.
func Example_approvalTest() {
	_ = func(t *testing.T) { // func TestGreeter(t *testing.T)
		goldentest.Run(t, "testdata/golden", greeter)
	}
}

// ExamplePlay plays a scenario (a redelivery after a lost acknowledgement)
// through the greeter on SQLite and prints the transcript's deliveries and
// business table: the duplicate is acknowledged and changes nothing.
func ExamplePlay() {
	sc, err := golden.Parse([]byte(`
message hello
  header eventId E-1
  body hello, world
crash after-commit
send hello
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	db, cleanup, err := golden.OpenBackend(ctx, golden.SQLite)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	tr, err := golden.Play(ctx, db, sc, greeter)
	if err != nil {
		fmt.Println(err)
		return
	}
	text := tr.Text[strings.Index(tr.Text, "== deliveries"):strings.Index(tr.Text, "== inbox")]
	fmt.Print(text)
	// Output:
	// == deliveries
	// 1. fault: the next delivery crashes after commit
	// 2. send hello
	//    hello delivery 1: ack | outcome=PROCESSED status=PROCESSED attempts=1
	//       the ack is lost (crash after commit) -> the broker redelivers
	//    hello delivery 2: ack | outcome=DUPLICATE status=PROCESSED attempts=1
	//
	// == calls to external services
	//    (none)
	//
	// == table greetings (event_id, text)
	//    E-1 | hello, world
	//
}

// TestApprovalFiles checks the approval workflow on a throwaway case:
// received files, CI refusing to write, approve, and a readable diff.
func TestApprovalFiles(t *testing.T) {
	dir := t.TempDir()
	caseDir := filepath.Join(dir, "hello")
	if err := os.MkdirAll(caseDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(body string) {
		sc := "message hello\n  header eventId E-1\n  body " + body + "\nsend hello\n"
		if err := os.WriteFile(filepath.Join(caseDir, golden.ScenarioFile), []byte(sc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("hello")
	ctx := t.Context()
	approved := filepath.Join(caseDir, "approved.x.txt")
	received := filepath.Join(caseDir, "received.x.txt")

	t.Setenv("CI", "true")
	t.Setenv("INBOXKIT_UPDATE_GOLDEN", "1")
	t.Setenv("INBOXKIT_GOLDEN_BACKENDS", "sqlite")
	if golden.Updating() {
		t.Fatal("Updating() is true in CI")
	}
	ms, err := golden.Verify(ctx, dir, greeter, golden.Label("x"))
	if err != nil || len(ms) != 1 || !ms[0].Missing {
		t.Fatalf("Verify without approved file in CI: %v %v", ms, err)
	}
	if _, err := os.Stat(approved); err == nil {
		t.Fatal("an approved file was written in CI")
	}
	if _, err := os.Stat(received); err != nil {
		t.Fatalf("no received file: %v", err)
	}
	if _, err := golden.Approve(ctx, dir, greeter, golden.Label("x")); err != golden.ErrCI {
		t.Fatalf("Approve in CI: %v, want ErrCI", err)
	}

	t.Setenv("CI", "")
	if ms, err := golden.Approve(ctx, dir, greeter, golden.Label("x")); err != nil || len(ms) != 0 {
		t.Fatalf("Approve: %v %v", ms, err)
	}
	if _, err := os.Stat(received); err == nil {
		t.Fatal("the stale received file was not removed after approval")
	}
	if ms, err := golden.Verify(ctx, dir, greeter, golden.Label("x")); err != nil || len(ms) != 0 {
		t.Fatalf("Verify after Approve: %v %v", ms, err)
	}

	write("servus")
	ms, err = golden.Verify(ctx, dir, greeter, golden.Label("x"))
	if err != nil || len(ms) != 1 {
		t.Fatalf("Verify after a change: %v %v", ms, err)
	}
	for _, want := range []string{"-   E-1 | hello", "+   E-1 | servus", "--- approved.x.txt", "+++ received.x.txt (sqlite)"} {
		if !strings.Contains(ms[0].Diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, ms[0].Diff)
		}
	}
}
