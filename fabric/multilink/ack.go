package multilink

import (
	"fmt"

	"github.com/flexlink/flexlink/fabric"
)

// Acknowledgements (see the package documentation): the receiver answers
// every part frame that asks for it with an ack frame naming the part, on
// the link the part came over; the sender keeps every part it issued until
// the acks cover the message, and resends what a failed link carried that
// is not acknowledged.

// sendAckLocked acknowledges part h, which arrived over link j (the
// reader's, or one whose ack failed). The ack goes back over j, so that
// losing it means losing j, which makes the sender resend the part anyway;
// when j has failed here already, any live link carries it.
func (r *reader) sendAckLocked(j int, h header) {
	c := r.c
	if !h.wantAck || c.st.err != nil {
		return
	}
	if c.st.dead[j] {
		j = c.st.live()
		if j < 0 {
			return
		}
	}
	frame := make([]byte, c.opt.FrameBytes)
	ackOf(h).put(frame)
	go r.awaitAck(j, h, c.links[j].Send(frameTag(), frame))
}

// awaitAck waits for the send of the ack of part h over link j. When it
// fails the link is dead, and the ack is sent again over another.
func (r *reader) awaitAck(j int, h header, req fabric.Request) {
	<-req.Done()
	err := req.Err()
	if err == nil {
		return
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.err != nil {
		return
	}
	c.linkDownLocked(j, fmt.Errorf("acknowledge part [%d,+%d) of message %d: %w", h.off, h.len, h.seq, err))
	r.sendAckLocked(j, h)
}
