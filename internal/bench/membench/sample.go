package membench

import (
	"bufio"
	"bytes"
	"os"
	"runtime/metrics"
	"strconv"
)

// memory is one reading of the process's memory.
type memory struct {
	HeapInuse uint64 // heap spans in use: objects (live or not yet swept) plus fragmentation
	HeapLive  uint64 // heap marked live by the last GC
	Stacks    uint64 // goroutine stacks
	Goroutine uint64 // live goroutines
	RSS       uint64 // resident set size (VmRSS); 0 where /proc is unavailable
}

// Metric names read from runtime/metrics: no stop-the-world, cheap enough to
// sample every 100ms.
const (
	metricHeapObjects = "/memory/classes/heap/objects:bytes"
	metricHeapUnused  = "/memory/classes/heap/unused:bytes"
	metricHeapLive    = "/gc/heap/live:bytes"
	metricStacks      = "/memory/classes/heap/stacks:bytes"
	metricGoroutines  = "/sched/goroutines:goroutines"
)

// reader reads memory, reusing its sample slice.
type reader struct {
	samples []metrics.Sample
}

func newReader() *reader {
	names := []string{metricHeapObjects, metricHeapUnused, metricHeapLive, metricStacks, metricGoroutines}
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	return &reader{samples: s}
}

func (r *reader) read() memory {
	metrics.Read(r.samples)
	u := func(i int) uint64 {
		if r.samples[i].Value.Kind() == metrics.KindUint64 {
			return r.samples[i].Value.Uint64()
		}
		return 0
	}
	return memory{
		HeapInuse: u(0) + u(1),
		HeapLive:  u(2),
		Stacks:    u(3),
		Goroutine: u(4),
		RSS:       rss(),
	}
}

// rss returns the process's VmRSS in bytes, or 0.
func rss() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("VmRSS:")) {
			continue
		}
		fields := bytes.Fields(line[len("VmRSS:"):])
		if len(fields) == 0 {
			return 0
		}
		kb, err := strconv.ParseUint(string(fields[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10 // the kernel reports kB (KiB)
	}
	return 0
}
