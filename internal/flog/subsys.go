// Package flog is flexlink's logging on top of hclog, shaped like
// NCCL_DEBUG: a level (FLEXLINK_DEBUG), a subsystem filter
// (FLEXLINK_DEBUG_SUBSYS, like NCCL_DEBUG_SUBSYS) and a per-rank file
// (FLEXLINK_DEBUG_FILE, like NCCL_DEBUG_FILE).
//
// A Logger is an hclog.Logger: code that logs keeps calling Info, Debug
// and Trace. Warnings and errors are always written; lines below WARN are
// written when their subsystem is selected. A logger's subsystem comes
// from Sub, or from its name (Named("shm") is SHM, "bootstrap" BOOTSTRAP,
// ...); a line from a logger without one is always written.
package flog

import (
	"fmt"
	"strings"
)

// Subsys is a set of subsystems.
type Subsys uint32

// The subsystems, with NCCL_DEBUG_SUBSYS's names where one exists.
const (
	Init      Subsys = 1 << iota // communicator set-up, settings, topology summary
	Coll                         // one line per collective call
	P2P                          // one line per send/recv group
	SHM                          // shared-memory links
	Net                          // network and tcp links, link failures, the balancer's shares
	Graph                        // topology and plans
	Env                          // settings read
	Bootstrap                    // rendezvous and the launcher's join
	All       Subsys = 1<<iota - 1
)

// Default is what an unset FLEXLINK_DEBUG_SUBSYS selects (NCCL's
// default is INIT plus a few; flexlink's network lines include the
// balancer's shares).
const Default = Init | Net

var names = []struct {
	name string
	s    Subsys
}{
	{"INIT", Init}, {"COLL", Coll}, {"P2P", P2P}, {"SHM", SHM}, {"NET", Net},
	{"GRAPH", Graph}, {"ENV", Env}, {"BOOTSTRAP", Bootstrap}, {"ALL", All},
	// aliases: issue 21's names and NCCL's TOPO-ish spellings
	{"TOPO", Graph}, {"LINK", Net | SHM}, {"BALANCE", Net}, {"LAUNCH", Bootstrap},
}

// Words lists the names ParseSubsys accepts (for the settings registry).
func Words() []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.name
	}
	return out
}

// ParseSubsys reads a FLEXLINK_DEBUG_SUBSYS value: a comma-separated
// list of names in any case; a leading ^ selects every subsystem except
// the ones listed (NCCL_DEBUG_SUBSYS's syntax). Empty means Default.
func ParseSubsys(v string) (Subsys, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return Default, nil
	}
	invert := strings.HasPrefix(v, "^")
	v = strings.TrimPrefix(v, "^")
	var set Subsys
	for _, w := range strings.Split(v, ",") {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		s, ok := lookup(w)
		if !ok {
			return 0, fmt.Errorf("subsystem %q: want a comma-separated list of %s (^ first: all but these)", w, strings.Join(Words(), ", "))
		}
		set |= s
	}
	if invert {
		return All &^ set, nil
	}
	return set, nil
}

func lookup(w string) (Subsys, bool) {
	for _, n := range names {
		if strings.EqualFold(n.name, w) {
			return n.s, true
		}
	}
	return 0, false
}

// String names the set, ALL when every subsystem is in it.
func (s Subsys) String() string {
	if s&All == All {
		return "ALL"
	}
	var out []string
	for _, n := range names {
		if n.s&(n.s-1) == 0 && s&n.s != 0 { // single bits only
			out = append(out, n.name)
		}
	}
	return strings.Join(out, ",")
}

// ofName is the subsystem of a logger named name (the last element of
// hclog's dotted name): 0 when the name says nothing.
func ofName(name string) Subsys {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	switch name {
	case "shm":
		return SHM
	case "tcp", "net", "socket", "ucx", "multilink", "nvlink", "pcie":
		return Net
	case "bootstrap", "rendezvous":
		return Bootstrap
	case "topo":
		return Graph
	}
	return 0
}
