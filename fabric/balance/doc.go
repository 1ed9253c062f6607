// Package balance decides how to split one message's bytes across the
// links that join two GPUs (NVLink, host-staged PCIe, RDMA NICs). It is the
// two-stage adaptive load balancer of FlexLink (Shen, Zhang, Zhao 2025),
// whose method is not published; this is our design.
//
// The Planner is a pure state machine in the style of etcd's raft:
// measurements in, shares out. It does no I/O and reads no clock: callers
// time their transfers and hand the durations in as Observations. So every
// behaviour — convergence, damping, recovery after contention — is tested
// with a deterministic simulation and golden traces, without GPUs or sleeps.
// The one file that touches the disk (cache.go) stores and loads the
// planner's State and is not used by the planner itself.
//
// # Model
//
// Each link is modelled as time(b) = latency + b·cost, cost being seconds
// per byte (1/bandwidth). A split of B bytes gives link i the share x_i; it
// finishes at latency_i + x_i·B·cost_i, and the transfer finishes when the
// slowest part does, plus a fixed SplitOverhead for every link beyond the
// first (descriptors, extra launches, the completion join). The best split
// equalises the finish times of the links it uses ("water filling"), and
// the best set of links is found by trying every subset (at most MaxLinks
// links, so at most 256 subsets). Small messages use one link: below the
// Threshold the overhead of a second link costs more than it saves.
//
// # Stage 1: profile
//
// NewPlanner fits latency and cost per link from a short profile (probe
// transfers of a few sizes; least squares over time = latency + bytes·cost)
// and falls back to the topology's nominal figures for links without
// probes. Every size class (powers of two, 64 KiB … 4 GiB by default) gets
// its initial shares from that model.
//
// # Stage 2: feedback
//
// Observe feeds back the measured duration of each link's part. Per size
// class and link the planner keeps a moving estimate of the cost (weight
// Alpha; a plain mean of the samples while there are fewer than 1/Alpha
// since the last jump) that averages noise out. A measurement beyond
// JumpRatio from the estimate is a change of regime, not noise, and the
// detector is asymmetric because the costs of being wrong are: a slower
// link holds every transfer back, so the estimate jumps at once; a faster
// one only leaves bandwidth unused, so that waits for a second measurement.
// A slow jump stays provisional for one call, which hedges: it uses the mix
// of the splits planned under the old and the new estimate that minimises
// the worse of the two regrets, and its measurement then keeps or undoes
// the jump (a lone outlier such as a page fault costs one hedged call).
// The shares move a Step fraction of the way toward the split that
// equalises finish times under the estimates (the whole way after a jump),
// but only when that split would finish more than Deadband sooner than
// the current one (hysteresis), so they settle instead of chasing noise.
// A link that is not measured in a call (its part rounded to nothing, or
// it was left out because it looked slow) has its estimate decay toward
// the profile by Decay per call, so it is tried again; the first part it
// gets back is sized to finish with the others even at the speed it was
// last measured at, which makes the retry cheap when it is still slow.
//
// Exclude drops a failed link at once (every class is re-planned without
// it, with no damping: a dead link must not wait for a moving average);
// Admit brings it back with its profile estimates.
package balance
