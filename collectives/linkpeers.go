package collectives

import (
	"fmt"

	"github.com/flexlink/flexlink/fabric"
	"github.com/flexlink/flexlink/internal/errs"
)

// LinkPeers is Peers over one fabric.Link per peer, for HostBuffers. The
// rank runtime builds it from the links it connected; tests build it from
// fake.Network.Links.
type LinkPeers struct {
	rank  int
	links []fabric.Link
}

// NewLinkPeers returns the Peers of rank in a communicator of size ranks:
// links[p] joins rank to p, and links[rank] is nil. Send and Recv accept
// HostBuffers only; any other Buffer, or a peer without a link, gives a
// request that has already failed.
func NewLinkPeers(rank, size int, links []fabric.Link) *LinkPeers {
	if size < 1 || rank < 0 || rank >= size || len(links) != size {
		panic(fmt.Sprintf("collectives.NewLinkPeers(rank %d, size %d, %d links): invalid arguments", rank, size, len(links)))
	}
	return &LinkPeers{rank: rank, links: links}
}

// Rank is this rank.
func (p *LinkPeers) Rank() int { return p.rank }

// Size is the number of ranks.
func (p *LinkPeers) Size() int { return len(p.links) }

// Send posts b to peer on its link (fabric.Link.Send's contract).
func (p *LinkPeers) Send(peer int, tag fabric.Tag, b Buffer) fabric.Request {
	l, buf, err := p.resolve(peer, b, "send to")
	if err != nil {
		return fabric.DoneReq(err)
	}
	return l.Send(tag, buf)
}

// Recv posts b for the next message from peer (fabric.Link.Recv's contract).
func (p *LinkPeers) Recv(peer int, tag fabric.Tag, b Buffer) fabric.Request {
	l, buf, err := p.resolve(peer, b, "recv from")
	if err != nil {
		return fabric.DoneReq(err)
	}
	return l.Recv(tag, buf)
}

// Abort aborts every link with err (see fabric.Link.Abort): pending and
// later transfers fail, and the peers see the links go away. The rank
// runtime calls it when the job is aborted.
func (p *LinkPeers) Abort(err error) {
	for _, l := range p.links {
		if l != nil {
			l.Abort(err)
		}
	}
}

func (p *LinkPeers) resolve(peer int, b Buffer, what string) (fabric.Link, []byte, error) {
	if peer < 0 || peer >= len(p.links) || p.links[peer] == nil {
		return nil, nil, fmt.Errorf("rank %d: %s rank %d: no link", p.rank, what, peer)
	}
	buf, ok := b.(HostBuffer)
	if !ok && b != nil {
		return nil, nil, fmt.Errorf("rank %d: %s rank %d: %T is not a HostBuffer: %w", p.rank, what, peer, b, errs.ErrNotSupported)
	}
	return p.links[peer], buf, nil
}
