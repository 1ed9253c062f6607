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
// default, the same on both sides) holding a header — message sequence
// number, total length, the part's offset and length, the caller's tag —
// followed by the payload. A part that fits in the frame after the header
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
// (backpressure) when every earlier receive has completed, and is staged in
// a buffer of its own otherwise — waiting then could deadlock, because the
// earlier receive may need a part queued behind it on the same link.
//
// # Failure
//
// A link whose send or receive fails is dead for the channel: the planner
// excludes it (every later split avoids it), Options.OnLinkFailure hears
// of it, and every part that was in flight on it is sent again, split over
// the remaining links, with the same offsets. The receiver counts bytes by
// range, so a part that arrives twice is harmless, and a part that arrives
// for a message already completed is received and dropped. This relies on
// the Link contract that a send which completed has been delivered (true
// of copy-engine and rendezvous links); a transport that completes sends on
// local buffering would need acknowledgements, which are not implemented.
// Only when every link is dead does the channel fail, with errs.ErrPeerLost.
package multilink
