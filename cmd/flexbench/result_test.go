package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// flatResult is result as it was before it was split into embedded
// structs: one flat struct. Its JSON is the reference the split must keep.
type flatResult struct {
	Bytes   int64   `json:"size"`
	Count   int     `json:"count"`
	Type    string  `json:"type"`
	Op      string  `json:"redop"`
	Root    int     `json:"root"`
	OutTime float64 `json:"out_time_us"`
	OutAlg  float64 `json:"out_algbw_gbs"`
	OutBus  float64 `json:"out_busbw_gbs"`
	OutErr  int64   `json:"out_wrong"`
	InTime  float64 `json:"in_time_us"`
	InAlg   float64 `json:"in_algbw_gbs"`
	InBus   float64 `json:"in_busbw_gbs"`
	InErr   int64   `json:"in_wrong"`
}

// TestResultJSON checks that a row encodes exactly as the flat struct did
// (same keys, same order, same values), alone, in a list (--json of the
// host path) and in a map of lists (--json of the GPU path), and that it
// decodes back to itself.
func TestResultJSON(t *testing.T) {
	row := func(i int) (result, flatResult) {
		f := flatResult{Bytes: 1 << (10 + i), Count: 256 << i, Type: "float", Op: "sum", Root: i - 1,
			OutTime: 12.5 + float64(i), OutAlg: 0.08, OutBus: 0.15, OutErr: int64(i),
			InTime: 11.25, InAlg: 0.09, InBus: 0.17, InErr: 0}
		r := result{}
		r.Bytes, r.Count, r.Type, r.Op, r.Root = f.Bytes, f.Count, f.Type, f.Op, f.Root
		r.OutTime, r.OutAlg, r.OutBus, r.OutErr = f.OutTime, f.OutAlg, f.OutBus, f.OutErr
		r.InTime, r.InAlg, r.InBus, r.InErr = f.InTime, f.InAlg, f.InBus, f.InErr
		return r, f
	}
	var rows []result
	var flat []flatResult
	for i := range 3 {
		r, f := row(i)
		rows, flat = append(rows, r), append(flat, f)
	}
	encode := func(v any, indent bool) []byte {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		if indent {
			enc.SetIndent("", "  ")
		}
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	for _, tc := range []struct {
		name      string
		got, want any
		indent    bool
	}{
		{"row", rows[1], flat[1], false},
		{"rows", rows, flat, false},
		{"map", map[string][]result{"allreduce": rows}, map[string][]flatResult{"allreduce": flat}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, want := encode(tc.got, tc.indent), encode(tc.want, tc.indent)
			if !bytes.Equal(got, want) {
				t.Errorf("JSON differs from the flat row:\n got %s\nwant %s", got, want)
			}
		})
	}
	const golden = `{"size":2048,"count":512,"type":"float","redop":"sum","root":0,"out_time_us":13.5,"out_algbw_gbs":0.08,"out_busbw_gbs":0.15,"out_wrong":1,"in_time_us":11.25,"in_algbw_gbs":0.09,"in_busbw_gbs":0.17,"in_wrong":0}` + "\n"
	if got := string(encode(rows[1], false)); got != golden {
		t.Errorf("row JSON:\n got %s\nwant %s", got, golden)
	}
	var back result
	if err := json.Unmarshal(encode(rows[2], false), &back); err != nil {
		t.Fatal(err)
	}
	if back != rows[2] {
		t.Errorf("decoded %+v, want %+v", back, rows[2])
	}
}
