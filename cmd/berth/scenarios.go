package main

// The benchmark scenarios `berth bench` runs register themselves when
// imported.
import (
	_ "github.com/berth-go/berth/internal/bench/membench"
	_ "github.com/berth-go/berth/internal/bench/sqlbench"
	_ "github.com/berth-go/berth/internal/bench/sqsbench"
)
