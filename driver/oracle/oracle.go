// Package oracle links Oracle support: the pure-Go driver
// github.com/sijms/go-ora/v2, registered as "oracle". Use it with
// inbox.Oracle:
//
//	import _ "github.com/inboxkit/inboxkit/driver/oracle"
//
//	db, err := sql.Open("oracle", "oracle://user:pass@host:1521/service")
//	store, err := inbox.New(db, inbox.Oracle, inbox.Config{ClassifyFunc: classify.Of})
//
// The inbox and the classifier read Oracle errors from the ORA-nnnnn code
// in their text, which every Oracle driver writes, so any Oracle driver
// works: github.com/godror/godror (cgo and Oracle's client libraries at run
// time) is imported directly instead of this package. There is no Oracle
// server in the project's CI: the error mapping is tested with go-ora's
// error values only.
package oracle

import _ "github.com/sijms/go-ora/v2" // database/sql driver "oracle", pure Go
