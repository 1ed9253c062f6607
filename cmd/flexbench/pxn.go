package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/rank"
)

// pxnFooter prints, under the table, what the PXN proxy of every rank did
// over the whole run (FLEXLINK_PXN set and all-to-all across hosts): the
// bytes each rank sent on its NIC, messages sent and relayed for other
// local ranks (of them, gathered: handed over by the GPU hand-off),
// receives posted and buffers per receive. Every rank calls
// it (the counters are gathered); rank 0 prints.
func pxnFooter(ctx context.Context, c backend, p *printer) error {
	fb, ok := c.(flexBackend)
	if !ok {
		return nil
	}
	st, used := fb.c.PXNCounters()
	if !used {
		return nil
	}
	const fields = 9
	var nic [16]byte
	copy(nic[:], st.NIC)
	mine := []int64{st.Bytes, st.Messages, st.Relayed, st.Received, st.Receives, st.Buffers, 0, 0, st.Gathered}
	for i := range 16 {
		mine[6+i/8] |= int64(nic[i]) << (8 * (i % 8))
	}
	all := make([]int64, fields*c.size())
	if err := fb.c.AllGather(ctx, rank.Of(mine), rank.Of(all)); err != nil {
		return fmt.Errorf("gather PXN counters: %w", err)
	}
	if !p.on || p.json || p.csv != nil {
		return nil
	}
	fmt.Fprintf(p.w, "# PXN counters (whole run):\n#  %4s  %-12s %-8s %14s %9s %9s %9s %9s %9s %8s\n", "rank", "host", "nic", "nic_bytes", "messages", "relayed", "gathered", "received", "receives", "bufs/rcv")
	var tot [9]int64
	for r := range c.size() {
		v := all[r*fields : (r+1)*fields]
		var b strings.Builder
		for i := range 16 {
			if ch := byte(v[6+i/8] >> (8 * (i % 8))); ch != 0 {
				b.WriteByte(ch)
			}
		}
		per := 0.0
		if v[4] > 0 {
			per = float64(v[5]) / float64(v[4])
		}
		fmt.Fprintf(p.w, "#  %4d  %-12s %-8s %14d %9d %9d %9d %9d %9d %8.2f\n", r, c.host(r), b.String(), v[0], v[1], v[2], v[8], v[3], v[4], per)
		for i := range tot {
			tot[i] += v[i]
		}
	}
	per := 0.0
	if tot[4] > 0 {
		per = float64(tot[5]) / float64(tot[4])
	}
	fmt.Fprintf(p.w, "#  %4s  %-12s %-8s %14d %9d %9d %9d %9d %9d %8.2f\n", "all", "", "", tot[0], tot[1], tot[2], tot[8], tot[3], tot[4], per)
	return nil
}
