// Package sqlite links SQLite support: the pure-Go modernc.org/sqlite
// database/sql driver, registered as "sqlite". Use it with inbox.SQLite;
// open the file with a busy timeout, WAL and _txlock=immediate so that
// concurrent writers wait instead of failing:
//
//	import _ "github.com/inboxkit/inboxkit/driver/sqlite"
//
//	db, err := sql.Open("sqlite", "file:inbox.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
//	store, err := inbox.New(db, inbox.SQLite, inbox.Config{ClassifyFunc: classify.Of})
//
// SQLite queues no waiting writer: each polls for the lock, so under load
// one can lose it to the others for longer than busy_timeout and get
// SQLITE_BUSY. Its delivery is then handed back to the broker (a technical
// failure, delivered again, never lost). With several goroutines on one
// file, give busy_timeout room (the project's tests use 60000).
//
// The inbox and the classifier read SQLite errors through the Code() method
// of modernc's *sqlite.Error, so a program that imports _ "modernc.org/sqlite"
// instead gets the same behaviour; this package is the uniform spelling of
// that import.
package sqlite

import _ "modernc.org/sqlite" // database/sql driver "sqlite"
