package urlparam_test

import (
	"fmt"
	"net/url"
	"time"

	"github.com/berth-go/berth/internal/urlparam"
)

func Example() {
	q, _ := url.ParseQuery("concurrency=8&wait=soon&colour=blue")
	p := urlparam.New(q)
	fmt.Println(p.Int("concurrency", 16, 1, 1024))
	p.Duration("wait", 20*time.Second, 0, 20*time.Second)
	fmt.Println(p.Err())
	// Output:
	// 8
	// parameter "wait": "soon" is not a duration from 0s to 20s (e.g. 250ms, 5s)
	// unknown parameter(s) colour; accepted: concurrency, wait
}
