package staged_test

import (
	"fmt"

	"github.com/flexlink/flexlink/collectives/plane"
	"github.com/flexlink/flexlink/gpu"
)

// message is one send of a group case: rank r sends len bytes to rank
// (r+hop)%size and receives as many from (r-hop)%size (a device group
// takes no transfers to the rank itself). len -1: nil buffers, an empty
// message.
type message struct{ hop, len int }

// groupCases are the send/recv groups the pipeline test runs, with chunks
// of pipeChunk (64 KiB): messages of more than two chunks go in pieces,
// smaller ones whole in the first round. The last case is too small to
// pipeline.
var groupCases = []struct {
	name string
	msgs []message
	swap bool // each send's buffer is also its receive's (staged: sends read first)
}{
	{name: "one message each way, 4.6 chunks", msgs: []message{{1, 300_001}}},
	{name: "mixed", msgs: []message{{1, 200_000}, {1, 1000}, {1, 0}, {1, -1}, {1, 3 * pipeChunk}, {1, 150_001}, {1, 7}}},
	{name: "swap in place", msgs: []message{{1, 250_000}, {1, 5}}, swap: true},
	{name: "small (whole)", msgs: []message{{1, 100_000}, {1, 100}, {1, -1}}},
}

// pattern is byte j of message i from rank r in the current call.
func (x *caseRun) pattern(r, i, j int) byte { return byte((j*7 + i*13 + r*101 + x.call*37) % 251) }

// groups runs every group case and checks every received byte.
func (x *caseRun) groups() error {
	for _, gc := range groupCases {
		if err := x.group(gc.msgs, gc.swap); err != nil {
			return fmt.Errorf("group %q: %w", gc.name, err)
		}
	}
	return nil
}

func (x *caseRun) group(msgs []message, swap bool) error {
	x.call++
	var ops []plane.P2P
	sends, recvs := make([]*gpu.Buffer, len(msgs)), make([]*gpu.Buffer, len(msgs))
	var allocs []*gpu.Buffer
	defer func() {
		for _, b := range allocs {
			b.Free()
		}
	}()
	alloc := func(n int) (*gpu.Buffer, error) {
		if n < 0 { // a nil buffer: an empty message
			return nil, nil
		}
		b, err := x.dev.Alloc(max(n, 1))
		if err != nil {
			return nil, err
		}
		allocs = append(allocs, b)
		return b.Sub(0, n), nil
	}
	for i, m := range msgs {
		var err error
		if sends[i], err = alloc(m.len); err != nil {
			return err
		}
		in := make([]byte, max(m.len, 0))
		for j := range in {
			in[j] = x.pattern(x.rank, i, j)
		}
		if sends[i] != nil {
			if err := x.s.CopyHtoD(sends[i], in); err != nil {
				return err
			}
		}
		if swap {
			recvs[i] = sends[i]
		} else if recvs[i], err = alloc(m.len); err != nil {
			return err
		}
		ops = append(ops, plane.SendTo((x.rank+m.hop)%x.size, sends[i]), plane.RecvFrom((x.rank-m.hop+x.size)%x.size, recvs[i]))
	}
	if err := x.s.Synchronize(); err != nil {
		return err
	}
	if err := x.dc.Group(x.ctx, x.s, ops...); err != nil {
		return err
	}
	for i, m := range msgs {
		if recvs[i] == nil {
			continue
		}
		out := make([]byte, m.len)
		if err := x.s.CopyDtoH(out, recvs[i]); err != nil {
			return err
		}
		if err := x.s.Synchronize(); err != nil {
			return err
		}
		from := (x.rank - m.hop + x.size) % x.size
		for j, got := range out {
			if want := x.pattern(from, i, j); got != want {
				return fmt.Errorf("message %d (%d bytes from rank %d): byte %d is %d, want %d", i, m.len, from, j, got, want)
			}
		}
	}
	return nil
}
