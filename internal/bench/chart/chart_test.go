package chart_test

import (
	"bytes"
	"encoding/xml"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/berth-go/berth/internal/bench/chart"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the golden file; run go test ./internal/bench/chart -update and review the diff\n%s", name, got)
	}
	wellFormed(t, got)
}

// wellFormed parses the document as XML.
func wellFormed(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
}

func render(t *testing.T, c interface{ WriteSVG(io.Writer) error }) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := c.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestBarsGolden(t *testing.T) {
	c := chart.Bars{
		Title:  "sql/drain: throughput",
		XLabel: "instances",
		YLabel: "messages/s",
		Groups: []string{"1", "2", "4"},
		Series: []chart.Series{
			{Name: "berth", Values: []float64{4200, 7900, 12500}},
			{Name: "peek-baseline", Values: []float64{3100, math.NaN(), 6400}},
		},
	}
	golden(t, "bars.svg", render(t, c))
}

func TestLinesGolden(t *testing.T) {
	c := chart.Lines{
		Title:  "heap over time",
		XLabel: "seconds",
		YLabel: "heap bytes",
		Lines: []chart.Line{
			{Name: "berth", Points: []chart.XY{{0, 1e6}, {1, 3e6}, {2, 3.2e6}, {3, 3.1e6}}},
			{Name: "unbounded <batch>", Points: []chart.XY{{0, 1e6}, {1, 8e6}, {2, 1.6e7}, {3, 2.4e7}}},
		},
	}
	golden(t, "lines.svg", render(t, c))
}

func TestEmptyCharts(t *testing.T) {
	wellFormed(t, render(t, chart.Bars{Title: "empty"}))
	wellFormed(t, render(t, chart.Lines{Title: "empty"}))
	wellFormed(t, render(t, chart.Bars{Title: "zeros", Groups: []string{"a"}, Series: []chart.Series{{Name: "s", Values: []float64{0}}}}))
	wellFormed(t, render(t, chart.Lines{Title: "one point", Lines: []chart.Line{{Name: "l", Points: []chart.XY{{5, 5}}}}}))
}

func TestEscapes(t *testing.T) {
	b := render(t, chart.Bars{Title: `a <b> & "c"`, Groups: []string{"<g>"}, Series: []chart.Series{{Name: "&", Values: []float64{1}}}})
	wellFormed(t, b)
	if bytes.Contains(b, []byte("<b>")) {
		t.Fatal("title not escaped")
	}
}

func TestTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		n      int
		want   []float64
	}{
		{0, 10, 5, []float64{0, 2, 4, 6, 8, 10}},
		{0, 12500, 5, []float64{0, 5000, 10000, 15000}},
		{0, 0, 5, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{0, 0.37, 4, []float64{0, 0.1, 0.2, 0.3, 0.4}},
		{3, 7, 4, []float64{3, 4, 5, 6, 7}},
	}
	for _, c := range cases {
		if got := chart.Ticks(c.lo, c.hi, c.n); !slices.Equal(got, c.want) {
			t.Errorf("Ticks(%v, %v, %d) = %v, want %v", c.lo, c.hi, c.n, got, c.want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.25: "0.25", 1500: "1500", 15000: "15k", 2e6: "2M", 3.5e9: "3.5G"} {
		if got := chart.FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
}
