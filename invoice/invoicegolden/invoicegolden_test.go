package invoicegolden_test

import (
	"testing"

	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/invoice/invoicegolden"
)

// TestVerifyCorpus runs the path `inboxctl golden verify` takes (no
// testing.T inside) over the project's corpus on SQLite.
func TestVerifyCorpus(t *testing.T) {
	ms, err := invoicegolden.Verify(t.Context(), "../../testdata/golden", golden.Backends(golden.SQLite))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Error(m.String())
	}
}
