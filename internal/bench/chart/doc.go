// Package chart draws the benchmark charts that `berth bench` writes and
// docs/benchmarks.md embeds, as small standalone SVG documents with no
// dependency: a title, a value axis with round ticks and grid lines, a
// legend, and either grouped bars or lines.
//
// # Charts
//
// Bars is a grouped bar chart (throughput or round trips per message by
// instance count, one bar per strategy). Lines is a line chart (heap over
// time, one line per run). Both have a fixed size (Width × Height) and are
// deterministic: the same input gives the same bytes, so golden tests pin
// them and regenerated charts diff cleanly.
//
// # Values
//
// Bars start at zero; a NaN value leaves a gap. Axis labels are compact
// (FormatValue: 1.5k, 2M). Ticks picks 1, 2 or 5 times a power of ten.
package chart
