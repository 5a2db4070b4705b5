package inbox

import (
	"database/sql"
	"testing"

	"github.com/berth-go/berth/transport/postgres"
)

// The dialect is told from the pool's driver, including the pools
// postgres.Open and postgres.Connector make (their driver wraps pgx's).
// No connection is made.
func TestDialectOfPostgresPools(t *testing.T) {
	opened, err := postgres.Open("postgres://app@127.0.0.1:1/app", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	plain, err := sql.Open("pgx", "postgres://app@127.0.0.1:1/app")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for name, db := range map[string]*sql.DB{"postgres.Open": opened, "pgx stdlib": plain} {
		if got := dialectOf(db); got != Postgres {
			t.Errorf("%s: dialect %q, want %q", name, got, Postgres)
		}
	}
}
