package chart

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// Size of every chart, in SVG user units (pixels).
const (
	Width  = 720
	Height = 400
)

// Plot area margins.
const (
	marginLeft   = 70
	marginRight  = 170 // the legend sits here
	marginTop    = 40
	marginBottom = 60
)

// Palette is the series colours, in order; series beyond its length reuse
// it from the start.
var Palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// Series is one named row of bar values, one per group.
type Series struct {
	Name   string
	Values []float64 // by group; NaN leaves a gap
}

// Bars is a grouped bar chart: one cluster per group, one bar per series.
type Bars struct {
	Title  string
	XLabel string // under the groups
	YLabel string // beside the value axis
	Groups []string
	Series []Series
}

// XY is one point of a line.
type XY struct{ X, Y float64 }

// Line is one named line of a line chart.
type Line struct {
	Name   string
	Points []XY // in X order
}

// Lines is a line chart.
type Lines struct {
	Title  string
	XLabel string
	YLabel string
	Lines  []Line
}

// svg accumulates elements; the output is deterministic for given input.
type svg struct{ b strings.Builder }

func (s *svg) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64)
}

func esc(s string) string { return html.EscapeString(s) }

func (s *svg) open(title string) {
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", Width, Height, Width, Height)
	s.printf(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", Width, Height)
	s.printf(`<text x="%d" y="24" font-size="16" font-weight="bold" text-anchor="middle">%s</text>`+"\n", (Width-marginRight+marginLeft)/2, esc(title))
}

func (s *svg) close() { s.printf("</svg>\n") }

func plotW() float64 { return Width - marginLeft - marginRight }
func plotH() float64 { return Height - marginTop - marginBottom }

// yAxis draws the value axis with grid lines from 0 (or lo) to hi and
// returns the function mapping a value to a y coordinate.
func (s *svg) yAxis(lo, hi float64, label string) func(float64) float64 {
	ticks := Ticks(lo, hi, 5)
	lo, hi = ticks[0], ticks[len(ticks)-1]
	y := func(v float64) float64 {
		return marginTop + plotH() - (v-lo)/(hi-lo)*plotH()
	}
	for _, t := range ticks {
		s.printf(`<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#dddddd"/>`+"\n", marginLeft, num(y(t)), num(marginLeft+plotW()), num(y(t)))
		s.printf(`<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", marginLeft-6, num(y(t)), esc(FormatValue(t)))
	}
	s.printf(`<line x1="%d" y1="%d" x2="%d" y2="%s" stroke="#333333"/>`+"\n", marginLeft, marginTop, marginLeft, num(marginTop+plotH()))
	s.printf(`<line x1="%d" y1="%s" x2="%s" y2="%s" stroke="#333333"/>`+"\n", marginLeft, num(marginTop+plotH()), num(marginLeft+plotW()), num(marginTop+plotH()))
	if label != "" {
		s.printf(`<text x="16" y="%s" text-anchor="middle" transform="rotate(-90 16 %s)">%s</text>`+"\n", num(marginTop+plotH()/2), num(marginTop+plotH()/2), esc(label))
	}
	return y
}

func (s *svg) xLabel(label string) {
	if label != "" {
		s.printf(`<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", num(marginLeft+plotW()/2), Height-12, esc(label))
	}
}

func (s *svg) legend(names []string, line bool) {
	x := Width - marginRight + 16
	for i, n := range names {
		y := marginTop + 8 + i*20
		c := Palette[i%len(Palette)]
		if line {
			s.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", x, y, x+14, y, c)
		} else {
			s.printf(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", x, y-6, c)
		}
		s.printf(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", x+20, y, esc(n))
	}
}

// WriteSVG writes the chart as a standalone SVG document.
func (c Bars) WriteSVG(w io.Writer) error {
	var s svg
	s.open(c.Title)
	hi := 0.0
	for _, sr := range c.Series {
		for _, v := range sr.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				hi = max(hi, v)
			}
		}
	}
	y := s.yAxis(0, hi, c.YLabel)
	if n := len(c.Groups); n > 0 {
		groupW := plotW() / float64(n)
		ns := max(len(c.Series), 1)
		barW := groupW * 0.8 / float64(ns)
		for g, name := range c.Groups {
			x0 := marginLeft + float64(g)*groupW + groupW*0.1
			for i, sr := range c.Series {
				if g >= len(sr.Values) || math.IsNaN(sr.Values[g]) || math.IsInf(sr.Values[g], 0) {
					continue
				}
				v := sr.Values[g]
				top := y(max(v, 0))
				s.printf(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s, %s: %s</title></rect>`+"\n",
					num(x0+float64(i)*barW), num(top), num(barW), num(y(0)-top), Palette[i%len(Palette)], esc(sr.Name), esc(name), esc(FormatValue(v)))
			}
			s.printf(`<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(x0+groupW*0.4), num(marginTop+plotH()+18), esc(name))
		}
	}
	s.xLabel(c.XLabel)
	names := make([]string, len(c.Series))
	for i, sr := range c.Series {
		names[i] = sr.Name
	}
	s.legend(names, false)
	s.close()
	_, err := io.WriteString(w, s.b.String())
	return err
}

// WriteSVG writes the chart as a standalone SVG document.
func (c Lines) WriteSVG(w io.Writer) error {
	var s svg
	s.open(c.Title)
	xlo, xhi, yhi := math.Inf(1), math.Inf(-1), 0.0
	for _, l := range c.Lines {
		for _, p := range l.Points {
			xlo, xhi, yhi = min(xlo, p.X), max(xhi, p.X), max(yhi, p.Y)
		}
	}
	if math.IsInf(xlo, 0) {
		xlo, xhi = 0, 1
	}
	y := s.yAxis(0, yhi, c.YLabel)
	xt := Ticks(xlo, xhi, 6)
	xlo, xhi = xt[0], xt[len(xt)-1]
	x := func(v float64) float64 { return marginLeft + (v-xlo)/(xhi-xlo)*plotW() }
	for _, t := range xt {
		s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333"/>`+"\n", num(x(t)), num(marginTop+plotH()), num(x(t)), num(marginTop+plotH()+4))
		s.printf(`<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(x(t)), num(marginTop+plotH()+18), esc(FormatValue(t)))
	}
	for i, l := range c.Lines {
		if len(l.Points) == 0 {
			continue
		}
		pts := make([]string, len(l.Points))
		for j, p := range l.Points {
			pts[j] = num(x(p.X)) + "," + num(y(p.Y))
		}
		s.printf(`<polyline fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`+"\n", Palette[i%len(Palette)], strings.Join(pts, " "), esc(l.Name))
	}
	s.xLabel(c.XLabel)
	names := make([]string, len(c.Lines))
	for i, l := range c.Lines {
		names[i] = l.Name
	}
	s.legend(names, true)
	s.close()
	_, err := io.WriteString(w, s.b.String())
	return err
}

// Ticks returns about n evenly spaced round values (1, 2 or 5 times a
// power of ten apart) covering [lo, hi], starting at or below lo and ending
// at or above hi. An empty or inverted range becomes [lo, lo+1].
func Ticks(lo, hi float64, n int) []float64 {
	if math.IsNaN(lo) || math.IsNaN(hi) || hi <= lo {
		if math.IsNaN(lo) || math.IsInf(lo, 0) {
			lo = 0
		}
		hi = lo + 1
	}
	n = max(n, 1)
	raw := (hi - lo) / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := p
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	k0 := math.Floor(lo / step)
	scale := math.Pow(10, max(0, -math.Floor(math.Log10(step))))
	var out []float64
	for k := k0; ; k++ {
		v := k * step
		out = append(out, math.Round(v*scale)/scale)
		if v >= hi-step*1e-9 || len(out) > 100 {
			break
		}
	}
	if len(out) == 1 {
		out = append(out, out[0]+step)
	}
	return out
}

// FormatValue formats an axis or bar value compactly: 1500 → "1.5k",
// 2000000 → "2M", 0.25 → "0.25".
func FormatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	default:
		return trim(v)
	}
}

func trim(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}
