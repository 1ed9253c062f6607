package tcp

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A new rate estimate rests on at least rateWindow of busy time and
// rateBytes acknowledged; a window with less keeps the previous estimate.
// The bytes matter: a connection carrying only a trickle (a link whose
// share fell low) is busy mostly waiting for acknowledgements of small
// sends, and bytes per busy second then say little about the path.
const (
	rateWindow = 20 * time.Millisecond
	rateBytes  = 2 << 20
)

// rateMeter estimates a connection's line rate from the kernel's TCP_INFO:
// bytes acknowledged per microsecond that the socket had data in flight
// and was not held back by the receiver's window (tcpi_busy_time less
// tcpi_rwnd_limited). Time with nothing to send, and time the receiver
// did not read (it had not posted its buffer yet), do not count, so the
// figure is what the path carries while it is used, which a message's
// completion time is not: that includes the receiver's posting.
type rateMeter struct {
	mu         sync.Mutex
	acked, bsy []uint64  // per socket, at the last estimate
	rate       float64   // bytes/s; 0: none yet
	read       time.Time // when TCP_INFO was last read
}

// rateEvery spaces the TCP_INFO reads: callers may ask once per message.
const rateEvery = 2 * time.Millisecond

// Rate returns the connection's measured line rate in bytes per second,
// and false while there is none (too little traffic yet, or TCP_INFO is
// unavailable).
func (c *sendConn) Rate() (float64, bool) {
	m := &c.meter
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if now.Sub(m.read) < rateEvery {
		return m.rate, m.rate > 0
	}
	m.read = now
	if m.acked == nil {
		m.acked, m.bsy = make([]uint64, len(c.socks)), make([]uint64, len(c.socks))
	}
	var dAcked, dBusy uint64
	acked, bsy := make([]uint64, len(c.socks)), make([]uint64, len(c.socks))
	for i, s := range c.socks {
		raw, err := s.SyscallConn()
		if err != nil {
			return m.rate, m.rate > 0
		}
		var info *unix.TCPInfo
		raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
		if err != nil || info == nil {
			return m.rate, m.rate > 0
		}
		acked[i] = info.Bytes_acked
		bsy[i] = info.Busy_time - min(info.Rwnd_limited, info.Busy_time)
		dAcked += acked[i] - min(m.acked[i], acked[i])
		// The sockets run side by side: the connection was busy for the
		// longest of their busy times, not their sum.
		dBusy = max(dBusy, bsy[i]-min(m.bsy[i], bsy[i]))
	}
	if time.Duration(dBusy)*time.Microsecond < rateWindow || dAcked < rateBytes {
		return m.rate, m.rate > 0
	}
	m.acked, m.bsy = acked, bsy
	m.rate = float64(dAcked) / (float64(dBusy) * 1e-6)
	return m.rate, true
}
