// Package direct is the direct GPU data plane: the ranks of one host whose
// GPUs reach each other read and write each other's buffers over NVLink
// (CUDA IPC mappings, copy engines, kernels), with a share of large pushes
// staged over PCIe (and, when FLEXLINK_LINKS names net, one sent through
// the NIC's loopback) and small collectives run as flag kernels without a
// host handshake.
//
// The plane is split by responsibility; each type owns its state and its
// methods live in at most three files:
//
//	directPlane  direct.go ops.go moves.go  the per-call protocol (handshake
//	             messages, ordering), the algorithms: reductions (ops.go)
//	             and moves (moves.go)
//	peers        direct.go       host links, device, rank and size, trace
//	                             hook: shared by every part, read-only
//	eventSet     events.go       the protocol's IPC events: made, exported,
//	                             opened, recorded and waited on
//	laneSet      lanes.go        the copy lanes toward each peer (over
//	                             fabric/nvlink.Lanes) and how a push uses them
//	callPlan     split.go        one call's split, a pure function run once
//	                             per call: which bytes of each push go over
//	                             NVLink and over each staged share
//	shareList    shares.go       the staged link shares (fabric/linkshare:
//	                             the PCIe share, the net share riding with
//	                             it; fabric/shares makes the list from the
//	                             settings): their parts of the setup
//	                             exchange, ready and done messages, pushes
//	flagplane.Plane  setup.go    the flag kernels (collectives/flagplane):
//	                             limits, regions, abort watcher, one call,
//	                             their PCIe part; made and set up here,
//	                             called through Takes, P2P and Call
//	sharedState  shared.go shared_work.go
//	                             ranks that all share one GPU: the leader
//	                             runs each call in its context (the others'
//	                             ready and done messages, the done event)
//	linkStats    stats.go        bytes per link for LinkShares
//	callSeq, moveModes, pushScratch   call numbers, move modes, the push
//	                             allreduce's scratch
//
// fabric/nvlink and fabric/pcie hold the links' machinery without plane
// logic (the IPC window cache and the copy streams; the pinned staging
// buffers, their slot events and the sizing of a call's part),
// fabric/pcieshare and fabric/netshare the shares, fabric/shares which
// shares a plane has and their settings, and fabric/balance the planner
// and the timing samples that feed it. No file here opens a listener or
// a network provider. New (setup.go) builds the plane and runs its one
// setup exchange; ReadConfig (config.go) reads its settings.
package direct
