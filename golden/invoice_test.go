package golden_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/consumer"
	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/golden/goldentest"
	"github.com/inboxkit/inboxkit/invoice/invoicegolden"
)

const corpus = "../testdata/golden"

// TestInvoiceGolden pins down both invoice consumers: every case under
// testdata/golden is approved for the legacy port (approved.legacy.txt) and
// for the refactored consumer (approved.refactored.txt).
func TestInvoiceGolden(t *testing.T) {
	t.Run(invoicegolden.LabelLegacy, func(t *testing.T) {
		goldentest.Run(t, corpus, invoicegolden.Legacy(), golden.Label(invoicegolden.LabelLegacy))
	})
	t.Run(invoicegolden.LabelRefactored, func(t *testing.T) {
		goldentest.Run(t, corpus, invoicegolden.Refactored(nil), golden.Label(invoicegolden.LabelRefactored))
	})
}

// TestInvoiceGoldenBatch16 plays every case through the refactored consumer
// with BatchSize 16 (queued deliveries go to consumer.HandleBatch as one
// batch) against the same approved.refactored.txt: batching changes no
// transcript (issue 15).
func TestInvoiceGoldenBatch16(t *testing.T) {
	goldentest.Run(t, corpus, invoicegolden.Refactored(nil), golden.Label(invoicegolden.LabelRefactored), golden.BatchSize(16))
}

// TestInvoiceGoldenBatch16EffectsInTx is TestInvoiceGoldenBatch16 with the
// refactored consumer's handler declared consumer.Config.EffectsInTx (its
// letter goes through the outbox): its batches run without savepoints, and
// again with them where a delivery does not succeed, to the same approved
// transcripts.
func TestInvoiceGoldenBatch16EffectsInTx(t *testing.T) {
	goldentest.Run(t, corpus, effectsInTx(invoicegolden.Refactored(nil)), golden.Label(invoicegolden.LabelRefactored), golden.BatchSize(16))
}

// TestInvoiceGoldenEffectsInTx plays every case through the refactored
// consumer one delivery at a time with its handler declared
// consumer.Config.EffectsInTx, as inboxctl run declares it: a first
// delivery goes through inbox.Store.ProcessInTx (its INSERT with the
// handler's first statement), to the same approved transcripts. On
// PostgreSQL, where inboxkit-pgx holds that INSERT.
func TestInvoiceGoldenEffectsInTx(t *testing.T) {
	goldentest.Run(t, corpus, effectsInTx(invoicegolden.Refactored(nil)), golden.Label(invoicegolden.LabelRefactored), golden.Backends(golden.Postgres))
}

// effectsInTx is f with consumer.Config.EffectsInTx declared.
func effectsInTx(f golden.Factory) golden.Factory {
	return func(env *golden.Env) (golden.Subject, error) {
		sub, err := f(env)
		configure := sub.Configure
		sub.Configure = func(c *consumer.Config) {
			if configure != nil {
				configure(c)
			}
			c.EffectsInTx = true
		}
		return sub, err
	}
}

// Difference categories between the legacy and the refactored transcript.
const (
	diffDuplicates  = "duplicates"    // legacy: more than one letter (row or sent) for one invoice
	diffRejections  = "rejections"    // refactored: business rejection, acknowledged once
	diffDeadLetters = "dead-letters"  // a dead letter (inbox DLQ, or the broker's after its redelivery limit)
	diffNoEffect    = "not-applied"   // legacy wrote letters for an invoice the refactored consumer did not apply
	diffParked      = "letter-parked" // refactored: the letter is written, its request parked in the outbox (the letter service stayed down)
)

// intended lists, per case, the differences the refactoring means to make.
var intended = map[string][]string{
	"happy-path":                  nil,
	"producer-resend":             {diffDuplicates},
	"crash-after-commit":          {diffDuplicates},
	"crash-before-commit":         {diffDuplicates}, // legacy sends before its DB writes: the redelivery sends again
	"crash-during-letter-call":    {diffDuplicates},
	"database-error-on-commit":    {diffDuplicates},
	"two-instances-racing":        {diffDuplicates},
	"unknown-customer":            {diffRejections, diffDeadLetters},
	"invalid-amount":              {diffRejections, diffDeadLetters},
	"unsupported-currency":        {diffRejections, diffDeadLetters},
	"malformed-json":              {diffDeadLetters},
	"missing-field":               {diffDeadLetters},
	"missing-event-id":            {diffDeadLetters, diffNoEffect},
	"letter-service-down-then-up": nil,
	// legacy: nothing written, the message in the broker's DLQ; refactored:
	// the invoice applied, its letter request parked in the outbox for an
	// operator (inboxctl outbox retry).
	"letter-service-down-past-threshold": {diffDeadLetters, diffParked},
	"correlation-spanning-events":        {diffDuplicates, diffRejections, diffDeadLetters},
	"batch-at-once":                      {diffDuplicates, diffRejections, diffDeadLetters},
	// legacy: the broker redelivers until the crashes stop and the letter goes
	// out (sent on every try); refactored: processed at once, its relay dies
	// in every call and sends the request again after its lease, with the
	// same key: one letter.
	"crash-on-every-delivery": {diffDuplicates},
}

type effects struct {
	letters, docs, sent map[string]int // per invoice number
	parked              map[string]int // letter requests parked in the outbox, per invoice number
	rejects, dlq, bdlq  int
}

func effectsOf(tr *golden.Transcript) effects {
	e := effects{letters: map[string]int{}, docs: map[string]int{}, sent: map[string]int{}, parked: map[string]int{}}
	invoiceOf := map[string]string{} // letter id -> invoice number
	for _, r := range tr.Rows["shipping_letters"] {
		e.letters[r[1]]++
		invoiceOf[r[0]] = r[1]
	}
	for _, r := range tr.Rows["outbox"] { // MESSAGE_ID (the letter id), MSG_KEY, SEQ, DESTINATION, STATUS, ...
		if r[4] == "PARKED" {
			e.parked[invoiceOf[r[0]]]++
		}
	}
	for _, r := range tr.Rows["archived_documents"] {
		e.docs[r[1]]++
	}
	for _, c := range tr.Calls {
		if c.Effect == golden.CallSent { // whether or not the caller died in the call
			inv := strings.Fields(c.Summary)[3] // "letter <id> invoice <no> ..."
			e.sent[inv]++
		}
	}
	for _, d := range tr.Deliveries {
		switch d.Action {
		case "reject":
			e.rejects++
		case "dead-letter":
			e.dlq++
		case "broker-dead-letter":
			e.bdlq++
		}
	}
	return e
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestLegacyVersusRefactored plays every case through both consumers,
// prints where they differ and checks that they differ only where the
// refactoring meant them to.
func TestLegacyVersusRefactored(t *testing.T) {
	cases, err := golden.Cases(corpus)
	if err != nil {
		t.Fatal(err)
	}
	var summary strings.Builder
	fmt.Fprintf(&summary, "%-36s %-22s %-26s %s\n", "case", "legacy letters/sent/bDLQ", "refactored letters/sent/rej/DLQ", "differences")
	for _, dir := range cases {
		name := filepath.Base(dir)
		want, ok := intended[name]
		if !ok {
			t.Errorf("case %s: add its intended differences to the table in this test", name)
			continue
		}
		leg, err := golden.PlayCase(t.Context(), dir, golden.SQLite, invoicegolden.Legacy())
		if err != nil {
			t.Fatal(err)
		}
		ref, err := golden.PlayCase(t.Context(), dir, golden.SQLite, invoicegolden.Refactored(nil))
		if err != nil {
			t.Fatal(err)
		}
		l, r := effectsOf(leg), effectsOf(ref)

		// Rules of the refactored consumer, whatever the case.
		for inv, n := range r.letters {
			if n > 1 || r.docs[inv] > 1 || r.sent[inv] > 1 {
				t.Errorf("%s: refactored consumer wrote %d letters, %d documents, sent %d for %s; want at most one each", name, n, r.docs[inv], r.sent[inv], inv)
			}
			if l.letters[inv] == 0 && r.parked[inv] == 0 {
				t.Errorf("%s: refactored consumer wrote a letter for %s that the legacy one did not (and did not park its request)", name, inv)
			}
		}
		if r.bdlq > 0 {
			t.Errorf("%s: the broker dead-lettered a message of the refactored consumer; the inbox must decide first", name)
		}

		var got []string
		for inv := range l.letters {
			if l.letters[inv] > 1 || l.sent[inv] > 1 {
				got = append(got, diffDuplicates)
				break
			}
		}
		if r.rejects > 0 {
			got = append(got, diffRejections)
		}
		if r.dlq > 0 || l.bdlq > 0 {
			got = append(got, diffDeadLetters)
		}
		for inv := range l.letters {
			if r.letters[inv] == 0 {
				got = append(got, diffNoEffect)
				break
			}
		}
		if total(r.parked) > 0 {
			got = append(got, diffParked)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: legacy and refactored differ in %v, intended %v", name, got, want)
		}
		if len(want) == 0 && !maps.Equal(l.letters, r.letters) {
			t.Errorf("%s: letters differ: legacy %v, refactored %v", name, l.letters, r.letters)
		}
		diffs := strings.Join(got, ", ")
		if diffs == "" {
			diffs = "(same business effect)"
		}
		fmt.Fprintf(&summary, "%-36s %-22s %-26s %s\n", name,
			fmt.Sprintf("%d/%d/%d", total(l.letters), total(l.sent), l.bdlq),
			fmt.Sprintf("%d/%d/%d/%d", total(r.letters), total(r.sent), r.rejects, r.dlq), diffs)
	}
	t.Logf("legacy versus refactored (SQLite):\n%s", summary.String())
}

// batchSizes is a consumer.Observer that keeps the batch sizes it sees.
type batchSizes struct {
	mu    sync.Mutex
	sizes []int
}

func (b *batchSizes) Delivery(ctx context.Context, _ inboxkit.Message) (context.Context, func(consumer.Settled)) {
	return ctx, func(consumer.Settled) {}
}
func (b *batchSizes) Handler(h consumer.Handler) consumer.Handler { return h }
func (b *batchSizes) Batch(n int) {
	b.mu.Lock()
	b.sizes = append(b.sizes, n)
	b.mu.Unlock()
}

// The batch16 run of batch-at-once really is one batch of all five
// deliveries (so TestInvoiceGoldenBatch16 proves what it says), and matches
// the approved transcript.
func TestBatchAtOnceIsOneBatch(t *testing.T) {
	seen := &batchSizes{}
	f := func(env *golden.Env) (golden.Subject, error) {
		sub, err := invoicegolden.Refactored(nil)(env)
		sub.Configure = func(c *consumer.Config) { c.Observer = seen }
		return sub, err
	}
	m, _, err := golden.CheckCase(t.Context(), filepath.Join(corpus, "batch-at-once"), f, false,
		golden.Label(invoicegolden.LabelRefactored), golden.BatchSize(16), golden.Backends(golden.SQLite))
	if err != nil {
		t.Fatal(err)
	}
	if m != nil {
		t.Fatalf("batch-at-once with BatchSize 16: %s", m)
	}
	if !slices.Equal(seen.sizes, []int{5}) {
		t.Errorf("batch sizes %v, want one batch of 5", seen.sizes)
	}
}
