// Package all registers every Berth transport's URL scheme: import it for
// its side effect when a program picks its transport by URL.
//
//	import _ "github.com/berth-go/berth/transport/all"
package all

import (
	_ "github.com/berth-go/berth/transport/mem"       // mem://
	_ "github.com/berth-go/berth/transport/postgres"  // postgres://, postgresql://
	_ "github.com/berth-go/berth/transport/sqlite"    // sqlite://
	_ "github.com/berth-go/berth/transport/sqlserver" // sqlserver://
	_ "github.com/berth-go/berth/transport/sqs"       // sqs://
)
