// Package multilink joins several links between the same two ranks (NVLink,
// host-staged PCIe, NICs) into one fabric.Link whose bandwidth is close to
// their sum. Each message is split by a balance.Planner into parts, one per
// link, that move at the same time; the measured time of each part goes
// back to the planner, which moves the shares toward equal finish times.
//
// # Wire protocol
//
// The receiver of a fabric.Link must post every receive with the exact
// length of the message, so the receiving side must learn how the sender
// split a message before it can post the parts. Every part therefore
// travels as a frame: a fixed-size message (Options.FrameBytes, 4 KiB by
// default, the same on both sides) holding a header — frame kind, message
// sequence number, total length, the part's offset and length, the
// caller's tag — followed by the payload. A part that fits in the frame after the header
// rides inside it (one message: small messages cost what they cost on the
// underlying link, plus a copy of at most 4 KiB); a larger part follows as
// a second message of exactly its length, received straight into the
// caller's buffer. That costs one small message per link per transfer,
// which is the SplitOverhead the planner charges for every extra link, and
// which is why messages below the planner's threshold go over one link.
//
// Every link has a reader goroutine that keeps a frame receive posted, so
// the receiver learns of a part as soon as it arrives, on whichever link,
// in whatever order: parts are matched to receives by sequence number, not
// by link. The caller's receives are numbered in the order they are posted
// and the sender numbers its sends the same way, which keeps the channel
// FIFO. A part that arrives before its receive is posted waits on its link
// (backpressure) when every earlier receive has completed and no Send of
// this side awaits acknowledgements, and is staged in a buffer of its own
// otherwise — waiting then could deadlock, because the earlier receive may
// need a part, or the Send an ack, queued behind it on the same link.
//
// # Acknowledgements
//
// A part counts as delivered only when the receiver says so: every part
// frame asks for an acknowledgement (a flag in its header), and once the
// receiver holds the part's bytes — in the caller's buffer or staged — or
// knows it does not need them (a duplicate, a message already complete, a
// receive that failed on a size or tag mismatch), it sends back an ack
// frame: a frame of the same size and layout, of kind ack, naming the
// part's message, offset and length, and carrying no payload. It goes back
// over the link the part came over, interleaved with the parts that side
// sends (the readers tell the two kinds apart by the header), so an ack is
// lost only when that link is, and the sender then resends the part anyway;
// when that link has already failed on the receiving side, any live link
// carries it. The sender keeps, for every message, the parts it issued and
// the byte ranges acknowledged so far; a Send completes when the acks cover
// the message and no link still reads the caller's buffer. The cost is one
// frame per part in the other direction, which is little next to a large
// part, and for every Send the latency of the ack's way back.
//
// Options.NoAcks turns acknowledgements off, for links that complete a send
// only on delivery (copy engines, rendezvous links): the receiver then
// sends no acks, and a part counts as delivered when its link's Send
// completes.
//
// # Failure
//
// A link whose send or receive fails is dead for the channel: the planner
// excludes it (every later split avoids it), Options.OnLinkFailure hears of
// it, the link is aborted (so that the peer, which may not have seen the
// failure yet, stops using it too), and every part sent on it whose bytes
// are not all acknowledged is sent again, the missing ranges split over the
// remaining links with the same offsets. That covers the parts still in
// flight and those the link had buffered when it died, whose sends, over a
// transport that completes sends on local buffering (tcp), had long
// completed. The receiver counts bytes by range, so a part that arrives
// twice is harmless, and a part that arrives for a message already
// completed is received, dropped and acknowledged. A second copy that
// arrives while a link still owns the part's range of the caller's buffer
// (the first copy's receive has not finished) is staged, and copied in
// after it.
//
// Completion and memory. A Send completes when the receiver has
// acknowledged every byte (with Options.NoAcks, when the links' sends
// complete), so it needs the peer to receive: a program must not wait for
// a Send before posting the Recv its peer waits on, whatever the size
// (over tcp alone a small Send completed on buffering). The receiver
// acknowledges a part once it holds it, in the caller's buffer or staged:
// parts that arrive before their Recv is posted are staged in memory of
// their own while this side has a Send awaiting acknowledgements, so
// staging holds at most what the peer sends ahead of this side's Recvs
// (a collective's window of messages); a frame that claims a message over
// 1 TiB is rejected as corrupt. After the channel fails, a request still
// completes only once no link reads or writes its buffer.
//
// Nothing waits for a link that is gone: the transports report link
// failures (their own deadlines bound a silent peer), Abort and Close fail
// every pending request, and when every link is dead the channel fails,
// with errs.ErrPeerLost.
package multilink
