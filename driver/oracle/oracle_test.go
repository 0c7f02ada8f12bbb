package oracle_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sijms/go-ora/v2/network"

	"github.com/inboxkit/inboxkit"
	"github.com/inboxkit/inboxkit/classify"
	"github.com/inboxkit/inboxkit/inbox"
)

// No Oracle server exists here: the error mapping is tested with the error
// values of the pure-Go driver (go-ora) and godror's text.
func TestOracleErrorMapping(t *testing.T) {
	dup := &network.OracleError{ErrCode: 1, ErrMsg: "ORA-00001: unique constraint (APP.INBOX_EVENT_PROCESSING_PK) violated"}
	if !inbox.Oracle.IsDuplicate(dup) || !inbox.Oracle.IsDuplicate(fmt.Errorf("inbox: insert: %w", dup)) {
		t.Error("go-ora's ORA-00001 is not a duplicate")
	}
	deadlock := &network.OracleError{ErrCode: 60, ErrMsg: "ORA-00060: deadlock detected while waiting for resource"}
	if inbox.Oracle.IsDuplicate(deadlock) {
		t.Error("ORA-00060 taken for a duplicate")
	}
	if got, want := classify.Of(fmt.Errorf("handler: %w", deadlock)), (inboxkit.Decision{Class: inboxkit.ClassTechnical, Reason: inboxkit.ReasonDeadlock}); got != want {
		t.Errorf("Of(go-ora ORA-00060) = %+v, want %+v", got, want)
	}
	// go-ora fills ErrMsg from the code when the server sent none.
	if e := (&network.OracleError{ErrCode: 1}); !strings.Contains(e.Error(), "ORA-00001") || !inbox.Oracle.IsDuplicate(e) {
		t.Errorf("go-ora error without message: %q", e.Error())
	}
}
