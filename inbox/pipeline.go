package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"sync"
)

// The marked path's start in one round trip on pgx.
//
// On PostgreSQL through pgx's database/sql driver, a delivery alone
// without FirstDelivery runs on a connection of its own (sql.Conn):
// database/sql begins the handler's *sql.Tx on it as always (pgx sends
// BEGIN), then its attempt marker, COMMIT, BEGIN and the claim of the
// marker's row go as one pgx batch (one pipeline, one network round trip,
// through sql.Conn.Raw) into the transaction that BEGIN opened, instead of
// three round trips (marker, BEGIN, claim). The server runs them in order:
// the marker runs in the transaction database/sql began and is committed
// by the batch's COMMIT (rule 5) before the batch's BEGIN, and so before
// any statement of the handler, whatever the handler does: a process that
// dies after the batch leaves the attempt counted, as on the ordinary path
// (TestPipelinedMarkerIsCommittedBeforeTheHandler reads it from another
// connection while the handler runs). The handler's *sql.Tx then writes
// in the transaction the batch's BEGIN opened, whose claim holds the row,
// and its Commit or Rollback ends it. Every BEGIN and COMMIT the server
// gets is in its place: no warning (TestPipelinedMarkerLogsNoWarning).
// Four round trips for one business statement, as the hand-written
// transaction (BEGIN, inbox INSERT, business INSERT, COMMIT).
//
// When the marker counted nothing (a duplicate, an exhausted row) or the
// claim took nothing, the *sql.Tx is rolled back, one more round trip:
// such a delivery costs three, where the one-statement marker costs one.
// A broker's first delivery whose event has a row is most likely a
// duplicate, so it keeps the one-statement marker (pipes).
//
// The marker commits with synchronous_commit off as on the ordinary path
// (pgMarkUpsert): set_config(..., true) ends with the marker's
// transaction; the business transaction commits synchronously.
//
// inbox links no driver (ARCHITECTURE.md): pgx's batch is reached through
// reflection on the driver connection's exported pgx API (stdlib's
// Conn.Conn, pgx.Conn.SendBatch, pgx.Batch.Queue, the BatchResults). Any
// other driver, or a pgx whose API does not have these shapes, takes the
// ordinary path; the check is made once per driver connection type, and a
// Store whose driver has no batch stops looking.

// pipeCommit and pipeBegin are the batch's statements between the marker
// and the claim.
const (
	pipeCommit = "COMMIT"
	pipeBegin  = "BEGIN"
)

// pgxBatch is pgx's batch API as reflection found it on one driver
// connection type: its method Conn() *pgx.Conn, (*pgx.Conn).SendBatch(ctx,
// *pgx.Batch) pgx.BatchResults and (*pgx.Batch).Queue(sql string, args
// ...any). Methods are looked up by constant names only, never by index,
// so that the linker keeps only methods of those names (a lookup by index
// keeps every exported method of every type in the program).
type pgxBatch struct {
	batch reflect.Type // pgx.Batch
}

// batchResults is the part of pgx.BatchResults with no pgx type in its
// signature; Exec and QueryRow are called through reflection.
type batchResults interface {
	Close() error
}

var (
	ctxType       = reflect.TypeFor[context.Context]()
	anySliceType  = reflect.TypeFor[[]any]()
	stringType    = reflect.TypeFor[string]()
	errorType     = reflect.TypeFor[error]()
	pgxBatchTypes sync.Map // reflect.Type of a driver connection → *pgxBatch, nil when it has none
)

// pgxBatchOf returns pgx's batch API of the driver connection dc, or nil.
func pgxBatchOf(dc any) *pgxBatch {
	t := reflect.TypeOf(dc)
	if t == nil {
		return nil
	}
	if b, ok := pgxBatchTypes.Load(t); ok {
		return b.(*pgxBatch)
	}
	b := findPgxBatch(t)
	pgxBatchTypes.Store(t, b)
	return b
}

// findPgxBatch checks the shapes of the methods the batch needs.
func findPgxBatch(t reflect.Type) *pgxBatch {
	connM, ok := t.MethodByName("Conn")
	if !ok || connM.Type.NumIn() != 1 || connM.Type.NumOut() != 1 {
		return nil
	}
	pc := connM.Type.Out(0)
	sendM, ok := pc.MethodByName("SendBatch")
	if !ok || sendM.Type.NumIn() != 3 || sendM.Type.NumOut() != 1 || sendM.Type.In(1) != ctxType ||
		sendM.Type.In(2).Kind() != reflect.Pointer || sendM.Type.In(2).Elem().Kind() != reflect.Struct ||
		sendM.Type.In(2).Elem().Name() != "Batch" || sendM.Type.Out(0).Kind() != reflect.Interface {
		return nil
	}
	bt := sendM.Type.In(2)
	queueM, ok := bt.MethodByName("Queue")
	if !ok || !queueM.Type.IsVariadic() || queueM.Type.NumIn() != 3 || queueM.Type.In(1) != stringType || queueM.Type.In(2) != anySliceType {
		return nil
	}
	res := sendM.Type.Out(0)
	if !res.Implements(reflect.TypeFor[batchResults]()) {
		return nil
	}
	if m, ok := res.MethodByName("Exec"); !ok || m.Type.NumIn() != 0 || m.Type.NumOut() != 2 || m.Type.Out(1) != errorType ||
		!m.Type.Out(0).Implements(reflect.TypeFor[interface{ RowsAffected() int64 }]()) {
		return nil
	}
	if m, ok := res.MethodByName("QueryRow"); !ok || m.Type.NumIn() != 0 || m.Type.NumOut() != 1 ||
		!m.Type.Out(0).Implements(reflect.TypeFor[interface{ Scan(...any) error }]()) {
		return nil
	}
	return &pgxBatch{batch: bt.Elem()}
}

// pipeStep is one statement of the batch, its arguments bound.
type pipeStep struct {
	text string
	args []any
}

// markClaim is what the batch of marker, COMMIT, BEGIN and claim did.
type markClaim struct {
	// st, attempts, counted: the marker's row (pgMarkUpsert); noRow: it
	// returned none.
	st       string
	attempts int
	counted  bool
	noRow    bool
	// claimed: the claim's UPDATE took the row in the open transaction.
	claimed bool
	// open: the server's transaction begun by the batch is open (the
	// batch got past its BEGIN).
	open bool
}

// send runs marker, COMMIT, BEGIN and claim as one batch on the driver
// connection dc, in the transaction database/sql began on it, and reads
// their results in order.
func (b *pgxBatch) send(ctx context.Context, dc any, marker, claim pipeStep) (r markClaim, err error) {
	defer func() {
		if p := recover(); p != nil { // a pgx whose methods do more than their shapes say
			err = fmt.Errorf("inbox: pgx batch: %v", p)
		}
	}()
	batch := reflect.New(b.batch)
	queue := batch.MethodByName("Queue")
	for _, st := range []pipeStep{marker, {text: pipeCommit}, {text: pipeBegin}, claim} {
		queue.CallSlice([]reflect.Value{reflect.ValueOf(st.text), reflect.ValueOf(st.args)})
	}
	conn := reflect.ValueOf(dc).MethodByName("Conn").Call(nil)[0]
	res := conn.MethodByName("SendBatch").Call([]reflect.Value{reflect.ValueOf(ctx), batch})[0]
	br := res.Interface().(batchResults)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	exec := res.MethodByName("Exec")
	row := res.MethodByName("QueryRow").Call(nil)[0].Interface().(interface{ Scan(...any) error })
	err = row.Scan(&r.st, &r.attempts, &r.counted)
	if errors.Is(err, sql.ErrNoRows) {
		r.noRow, err = true, nil
	}
	if err != nil {
		return r, err
	}
	for i := range 3 {
		out := exec.Call(nil)
		if e, _ := out[1].Interface().(error); e != nil {
			return r, e
		}
		switch i {
		case 1:
			r.open = true
		case 2:
			r.claimed = out[0].Interface().(interface{ RowsAffected() int64 }).RowsAffected() == 1
		}
	}
	return r, nil
}

// pipes reports whether the jobs run on the pipelined marked path: one
// delivery alone, not started, that no broker vouched for as a first
// delivery (see above), where the dialect has the one-statement marker
// and the driver is not known to lack pgx's batch.
func (s *Store) pipes(jobs []*job, alone bool) bool {
	return alone && jobs[0].state == jobNew && !jobs[0].e.FirstDelivery && s.q.markUpsert.text != "" &&
		s.nopipe != nil && !s.nopipe.Load()
}

// errNoPipeline: the driver connection has no pgx batch.
var errNoPipeline = errors.New("inbox: no pgx batch on this driver connection")

// runPiped runs job j alone on the marked path with its marker, BEGIN and
// claim in one pgx batch (see above). It reports false, having done
// nothing, when the driver is not pgx: the ordinary path runs.
func (s *Store) runPiped(ctx context.Context, j *job) (bool, error) {
	if err := s.applyForgotten(ctx, j.e); err != nil {
		return true, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, nil // the ordinary path meets the same error and reports it
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return false, nil // as above; no marker was sent
	}
	t := &txn{Tx: tx}
	defer t.rollback() // before conn.Close: a handler that exits the goroutine must not leave conn waiting for it
	now := s.t(s.now())
	marker := pipeStep{s.q.markUpsert.text, s.q.markUpsert.bind(j.e.row(arg{"marker", markerError}, arg{"now", now}, arg{"max", s.cfg.Retry.MaxAttempts}))}
	claim := pipeStep{s.q.processFromFail.text, s.q.processFromFail.bind(j.e.row(arg{"now", now}))}
	var r markClaim
	var sendErr error
	err = conn.Raw(func(dc any) error {
		b := pgxBatchOf(dc)
		if b == nil {
			return errNoPipeline
		}
		r, sendErr = b.send(ctx, dc, marker, claim)
		return nil
	})
	if sendErr != nil {
		err = sendErr
	}
	if errors.Is(err, errNoPipeline) {
		s.nopipe.Store(true)
		t.rollback()
		return false, nil
	}
	if err != nil || !r.counted || !r.claimed {
		// The server's transaction (the one database/sql began, aborted
		// by a failed statement, or the batch's second) ends here; the
		// pool is used only after conn went back to it (a pool of one
		// connection must not wait for itself).
		t.rollback()
		_ = conn.Close()
	}
	if err != nil {
		if r.counted {
			s.remember(j.e, -1) // the marker is committed; take it back when we can
		}
		return true, fmt.Errorf("inbox: start attempt: %w", err)
	}
	if !r.counted {
		m, err := s.uncounted(ctx, s.db, j.e, r.st, r.attempts, r.noRow)
		if err != nil {
			return true, err
		}
		if m.again {
			return false, nil // the row changed meanwhile: the ordinary path looks again
		}
		m.apply(j)
		return true, nil
	}
	marked{started: r.attempts}.apply(j)
	if !r.claimed {
		// Another delivery claimed the row after our marker: nothing ran
		// (settle takes our marker back and runs the delivery again).
		j.state = jobAgain
		return true, nil
	}
	j.claimed = true
	err = s.runTx(ctx, t, j.alone(), true, false)
	t.rollback()
	_ = conn.Close()
	if err != nil {
		s.handBack(ctx, j.alone())
		return true, err
	}
	return true, nil
}
