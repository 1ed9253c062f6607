package capi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/flexlink/flexlink/bootstrap"
	"github.com/flexlink/flexlink/internal/errs"
)

// servedBy is where a world's rendezvous runs: the bootstrap server lives
// in the process that called ncclGetUniqueId, and when that process dies
// the others lose the server before anything else (their error names the
// server's address, not a rank). Every rank learns at join which ranks
// share that process, so the loss names them, as NCCL's users expect
// ncclGetLastError to name the rank that died.
type servedBy struct {
	addr  string // the rendezvous' address (idInfo.Server)
	ranks []int  // world ranks in the process that serves it; none when it is not a member's
	hosts []string
}

// learnServedBy tells every rank which ranks' process serves the
// rendezvous at addr: one allgather of a byte on the new store (serving:
// this rank's process is the server's).
func learnServedBy(ctx context.Context, store bootstrap.Store, addr, host string, serving bool) (servedBy, error) {
	mine := []byte{0}
	if serving {
		mine = append([]byte{1}, host...)
	}
	all, err := store.AllGather(ctx, mine)
	if err != nil {
		return servedBy{}, fmt.Errorf("tell which ranks serve the rendezvous: %w", err)
	}
	s := servedBy{addr: addr}
	for r, b := range all {
		if len(b) > 0 && b[0] == 1 {
			s.ranks = append(s.ranks, r)
			s.hosts = append(s.hosts, string(b[1:]))
		}
	}
	return s, nil
}

// explain adds to err, a lost bootstrap server, the ranks whose process
// served it: those are the ranks that died (or that this rank cannot
// reach). Other errors are returned as they are.
func (s servedBy) explain(err error) error {
	if len(s.ranks) == 0 || !errors.Is(err, errs.ErrPeerLost) || !strings.Contains(err.Error(), "bootstrap server at "+s.addr) {
		return err
	}
	who, verb := fmt.Sprintf("rank %d", s.ranks[0]), "is"
	if len(s.ranks) > 1 {
		who, verb = fmt.Sprintf("ranks %v", s.ranks), "are"
	}
	return fmt.Errorf("%w: the rendezvous ran in the process of world %s on %s (the one that called ncclGetUniqueId), so %s %s lost", err, who, s.hosts[0], who, verb)
}
