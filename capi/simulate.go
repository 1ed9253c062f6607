package capi

import (
	"fmt"
	"time"
)

// failed records err, a failed call on c: a refusal (Error.Local) only as
// the last error (ncclGetLastError), anything else also as the
// communicator's asynchronous error, which fails every later call.
func (c *Comm) failed(err error) {
	if isLocal(err) {
		c.mu.Lock()
		c.last = err.Error()
		c.mu.Unlock()
		return
	}
	c.note(err)
}

// The cost model of ncclGroupSimulateEnd: each call costs a start-up
// latency plus the bytes one rank moves over the busiest link divided by
// a bus bandwidth (nccl-tests' busbw factors). The figures are those
// measured for flexlink on 2xH200 and on the 2-core host (docs/PERF.md,
// docs/GPU.md), rounded: an estimate to order and overlap calls by, as
// PyTorch's _time_estimator uses it, not a measurement of this machine.
const (
	simDeviceLatency = 20 * time.Microsecond
	simDeviceBusBW   = 300e9 // bytes/s
	simHostLatency   = 50 * time.Microsecond
	simHostBusBW     = 1e9
)

// estimate is the model's time for w.
func (w *work) estimate() time.Duration {
	n := float64(w.c.nranks)
	one := float64(w.call.Count) * float64(w.dt.Size())
	var bus float64
	switch w.call.Kind {
	case AllReduce:
		bus = one * 2 * (n - 1) / n
	case AllGather, ReduceScatter, AllToAll:
		bus = one * (n - 1)
	case Broadcast, Reduce, Send, Recv:
		bus = one
	case Gather, Scatter:
		bus = one * (n - 1)
	}
	lat, bw := simHostLatency, simHostBusBW
	if w.device {
		lat, bw = simDeviceLatency, simDeviceBusBW
	}
	if w.c.nranks == 1 {
		bus = 0
	}
	return lat + time.Duration(bus/bw*float64(time.Second))
}

// GroupSimulateEnd is ncclGroupSimulateEnd for thread tid: it ends the
// group as ncclGroupEnd does (the group is closed whatever the result; the
// deferred initialisations run) but runs none of its calls, and returns
// the model's time for them (see estimate), the calls of one communicator
// one after another, communicators side by side. An inner group's end
// returns -1: nothing was simulated, as NCCL leaves simInfo alone then.
func (l *Library) GroupSimulateEnd(tid int) (time.Duration, error) {
	g, err := l.groups.end(tid)
	if err != nil {
		return 0, fmt.Errorf("ncclGroupSimulateEnd: %w", err)
	}
	if g == nil {
		return -1, nil
	}
	if err := g.runInits(); err != nil {
		return 0, err
	}
	if g.err != nil {
		return 0, fmt.Errorf("ncclGroupSimulateEnd: a call of the group was refused: %w", g.err)
	}
	per := map[*Comm]time.Duration{}
	var longest time.Duration
	for _, w := range g.works {
		per[w.c] += w.estimate()
		longest = max(longest, per[w.c])
	}
	return longest, nil
}
