package sqlite_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	msqlite "modernc.org/sqlite"

	"github.com/berth-go/berth/transport"
	"github.com/berth-go/berth/transport/sqlite"
	"github.com/berth-go/berth/transport/sqlqueue"
)

// TestInsertTextByRowCount checks that an insert's text depends on its
// number of rows only, whatever the rows' keys and delays, so one prepared
// statement serves every batch of a size; and that each row's waiting
// marker is still right: a keyed row waits when an earlier row of its key
// is in the table or in the same insert, never when delayed or unkeyed.
func TestInsertTextByRowCount(t *testing.T) {
	ctx := context.Background()
	d := sqlite.Dialect{}
	db, q := queueConn(t)
	row := func(key string, delay time.Duration) sqlqueue.InsertRow {
		return sqlqueue.InsertRow{UUID: fmt.Sprint(time.Now().UnixNano()), Headers: []byte(`{}`), Body: []byte("x"), OrderingKey: key, Delay: delay}
	}
	batches := [][]sqlqueue.InsertRow{
		{row("a", 0), row("", 0), row("a", 0), row("b", time.Hour)},
		{row("", 0), row("", 0), row("", 0), row("", 0)},
		{row("a", 0), row("c", 0), row("b", 0), row("c", 0)},
	}
	// Waiting, row by row: a2 follows a1 in the same insert; b's delayed
	// row never waits; then a follows the rows in the table, c's first
	// row has none before it, its second follows it, b follows the
	// delayed row.
	want := [][]int{{0, 0, 1, 0}, {0, 0, 0, 0}, {1, 0, 1, 1}}
	var text string
	for i, rows := range batches {
		sts := d.Insert(q, rows)
		if len(sts) != 1 {
			t.Fatalf("batch %d: %d statements, want 1", i, len(sts))
		}
		if i == 0 {
			text = sts[0].SQL
		} else if sts[0].SQL != text {
			t.Errorf("batch %d: the text differs from batch 0's, same number of rows:\n%s\n%s", i, sts[0].SQL, text)
		}
		res, err := db.ExecContext(ctx, sts[0].SQL, sts[0].Args...)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		last, _ := res.LastInsertId()
		got := make([]int, len(rows))
		for j := range rows {
			id := last - int64(len(rows)-1-j)
			if err := db.QueryRowContext(ctx, `SELECT waiting FROM `+q.Table+` WHERE id = ?`, id).Scan(&got[j]); err != nil {
				t.Fatal(err)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("batch %d: waiting = %v, want %v", i, got, want[i])
		}
	}
}

// TestKeyedBatchesKeepStatementMemory publishes 300 batches of 100 keyed
// messages, keys drawn at random, and 300 unkeyed batches of random sizes
// up to 300 messages, and checks the memory SQLite holds for prepared
// statements. The publisher prepares an insert once per text; when a keyed
// batch's text depended on its keys, every batch was a new text and the
// statement cache kept its 256 most recent ones (37.7 MB after 300 keyed
// batches alone), and batches of many sizes fill it the same way. Long
// texts are no longer prepared (maxPreparedText in sqlqueue).
func TestKeyedBatchesKeepStatementMemory(t *testing.T) {
	ctx := context.Background()
	db, closer, err := sqlite.Open(filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	sub, err := sqlqueue.NewSubscriber(sqlite.Dialect{}, sqlqueue.SubscriberConfig{DB: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize("orders"); err != nil {
		t.Fatal(err)
	}
	pub, err := sqlqueue.NewPublisher(sqlite.Dialect{}, sqlqueue.PublisherConfig{DB: db}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := range 600 {
		// Keyed batches of 100; unkeyed ones of any size up to 300.
		size := 100
		if i%2 == 1 {
			size = 1 + rand.IntN(300)
		}
		msgs := make([]*message.Message, size)
		for j := range msgs {
			msgs[j] = message.NewMessage(watermill.NewUUID(), []byte("x"))
			if i%2 == 0 {
				msgs[j].Metadata.Set(transport.MetadataOrderingKey, strconv.Itoa(rand.IntN(60)))
			}
		}
		if err := pub.Publish("orders", msgs...); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var used int
	if err := conn.Raw(func(dc any) error {
		used, _, err = dc.(msqlite.DBStatus).Status(msqlite.DBStatusStmtUsed, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("prepared statements: %d bytes", used)
	const limit = 8 << 20
	if used > limit {
		t.Errorf("prepared statements hold %d bytes after 600 batches, want at most %d", used, limit)
	}
}
