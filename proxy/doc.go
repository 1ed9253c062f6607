// Package proxy will be the CPU progress engine for the network operations
// of this rank and of its local peers (DESIGN.md, layer proxy/). Each rank
// runs one proxy, goroutines locked to OS threads, that alone drives the
// network providers of fabric/net: it posts sends and receives, polls them,
// moves GPU data through pinned staging and signals completion to the
// collective. It also serves the other ranks of its host: a local rank
// hands it an operation and its data (over shm for host buffers, over
// NVLink into the proxy's staging buffer for GPU buffers), so that data
// for a remote rank leaves from the NIC on that rank's rail (PXN), and the
// receiving proxy takes the messages that several senders route through
// one relay in one multi-receive.
//
// Proxy.AllToAllv runs inside every rank's all-to-all call; the group
// service (service.go, group.go) runs for the communicator's lifetime and
// carries grouped sends and receives through relays that are in no call.
//
// Sub-package pxn is the pure route planner the proxy follows: topology in,
// routes and the multi-receive plan out, no I/O.
package proxy
