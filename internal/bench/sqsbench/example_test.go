package sqsbench_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/berth-go/berth/internal/bench/sqsbench"
)

// A Counter under an HTTP client counts AWS JSON-protocol requests by
// operation. Put it in aws.Config.HTTPClient to count what any SDK-based
// library sends.
func ExampleCounter() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()

	counter := &sqsbench.Counter{}
	client := &http.Client{Transport: counter}
	defer client.CloseIdleConnections()
	for _, op := range []string{"ReceiveMessage", "ReceiveMessage", "DeleteMessageBatch"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set("X-Amz-Target", "AmazonSQS."+op)
		res, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		_ = res.Body.Close()
	}
	fmt.Println(counter.Counts()["ReceiveMessage"], counter.Counts()["DeleteMessageBatch"], counter.Total())
	// Output: 2 1 3
}
