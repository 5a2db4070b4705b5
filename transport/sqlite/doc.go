// Package sqlite is Berth's SQL queue transport on SQLite, over
// modernc.org/sqlite (pure Go, no cgo): the embedded default for local
// development and demos.
//
// # Opening by URL
//
// Importing the package registers sqlite://: sqlite:///abs/path.db,
// sqlite://relative.db, or sqlite://:memory: (one in-memory database shared
// by the whole process). Query parameters configure the transport; one URL
// serves both sides (each accepts, checks and ignores the other side's
// parameters); unknown ones are rejected, naming themselves. A file name
// holding what looks like a query ("x.db&consumer_group=billing", a
// parameter appended without ?) is rejected with the URL as it should be
// written, rather than opened as a new file of that name.
//
// # Concurrency
//
// Every publisher and subscriber of a process that opens the same file
// shares one connection (WAL journal, busy timeout, BEGIN IMMEDIATE
// transactions), so they never contend for SQLite's write lock with each
// other; publishers wake local subscribers in-process.
package sqlite
