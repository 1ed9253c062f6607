package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// printer writes rows on rank 0 only, as an nccl-tests table, CSV or JSON.
type printer struct {
	w       io.Writer
	on      bool
	csv     *csv.Writer
	json    bool
	sumBus  float64
	numRows int
}

func newPrinter(w io.Writer, on, asCSV, asJSON bool) *printer {
	p := &printer{w: w, on: on, json: asJSON}
	if asCSV {
		p.csv = csv.NewWriter(w)
	}
	return p
}

func (p *printer) header(cfg config, c backend) {
	if !p.on || p.json {
		return
	}
	if p.csv != nil {
		p.csv.Write([]string{"size", "count", "type", "redop", "root", "out_time_us", "out_algbw", "out_busbw", "out_wrong", "in_time_us", "in_algbw", "in_busbw", "in_wrong"})
		return
	}
	ncclTestsHeader(p.w, cfg)
	fmt.Fprintf(p.w, "# flexbench %s over %s: nranks %d, iters %d, warmup %d, check %v\n", cfg.spec.name, c.name(), c.size(), cfg.iters, cfg.warm, cfg.check)
	for r := 0; r < c.size(); r++ {
		fmt.Fprintf(p.w, "#  Rank %2d on %s\n", r, c.host(r))
	}
	fmt.Fprintf(p.w, "#%65s%41s\n", "out-of-place", "in-place")
	fmt.Fprintf(p.w, "#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(p.w, "#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
}

func (p *printer) row(r result) {
	p.sumBus += r.OutBus
	p.numRows++
	if !p.on || p.json {
		return
	}
	if p.csv != nil {
		f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
		p.csv.Write([]string{strconv.FormatInt(r.Bytes, 10), strconv.Itoa(r.Count), r.Type, r.Op, strconv.Itoa(r.Root),
			f(r.OutTime), f(r.OutAlg), f(r.OutBus), strconv.FormatInt(r.OutErr, 10),
			f(r.InTime), f(r.InAlg), f(r.InBus), strconv.FormatInt(r.InErr, 10)})
		p.csv.Flush()
		return
	}
	fmt.Fprintln(p.w, r.String())
}

func (p *printer) footer(rows []result) {
	if !p.on {
		return
	}
	switch {
	case p.json:
		enc := json.NewEncoder(p.w)
		enc.SetIndent("", "  ")
		enc.Encode(rows)
	case p.csv != nil:
		p.csv.Flush()
	default:
		var wrong int64
		for _, r := range rows {
			wrong += r.OutErr + r.InErr
		}
		ncclTestsFooter(p.w, wrong, p.sumBus, p.numRows)
	}
}

// plotBusBW draws out-of-place and in-place busbw against size (log2 axis)
// with gonum/plot; the file's extension (.svg, .png, .pdf) picks the format.
// name is the backend and the collective ("flexlink allreduce").
func plotBusBW(file, name string, n int, rows []result) error {
	pl := plot.New()
	pl.Title.Text = plotTitle(name, n)
	pl.X.Label.Text = "message size (bytes)"
	pl.Y.Label.Text = "bus bandwidth (GB/s)"
	pl.X.Scale = plot.LogScale{}
	pl.X.Tick.Marker = plot.LogTicks{Prec: -1}
	out, in := make(plotter.XYs, 0, len(rows)), make(plotter.XYs, 0, len(rows))
	for _, r := range rows {
		if r.Bytes <= 0 {
			continue
		}
		out = append(out, plotter.XY{X: float64(r.Bytes), Y: r.OutBus})
		in = append(in, plotter.XY{X: float64(r.Bytes), Y: r.InBus})
	}
	lo, err := plotter.NewLine(out)
	if err != nil {
		return err
	}
	li, err := plotter.NewLine(in)
	if err != nil {
		return err
	}
	li.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	pl.Add(lo, li, plotter.NewGrid())
	pl.Legend.Add("out-of-place", lo)
	pl.Legend.Add("in-place", li)
	pl.Legend.Top = true
	pl.Legend.Left = true
	return pl.Save(7*vg.Inch, 4.5*vg.Inch, file)
}

// plotTitle is the plot's title: "flexlink allreduce, 4 ranks".
func plotTitle(name string, n int) string {
	return fmt.Sprintf("%s, %d ranks", name, n)
}
