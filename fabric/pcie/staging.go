package pcie

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flexlink/flexlink/gpu"
)

// ErrNoStaging marks a staging buffer that could not be made (memfd,
// mapping or pinned registration refused): it costs the pair its PCIe
// share, not the job.
var ErrNoStaging = errors.New("no pcie staging buffer")

// Tx is the sending end of one ordered pair: the staging buffer, the copy
// stream that fills it (D2H), the event that joins that stream back into
// the caller's, and the slot events (IPC) the receiver waits on.
type Tx struct {
	Mem    *gpu.SharedHost
	Stream *gpu.Stream
	End    *gpu.Event
	Slots  []*gpu.Event
}

// NewTx makes a staging buffer of n bytes on dev, with its copy stream and
// slot events. An error that wraps ErrNoStaging means the buffer itself
// could not be made; any other is a failure of the device.
func NewTx(dev *gpu.Device, n int) (t *Tx, err error) {
	mem, err := dev.NewSharedHost(n)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoStaging, err)
	}
	t = &Tx{Mem: mem}
	defer func() {
		if err != nil {
			t.Close()
			t = nil
		}
	}()
	if t.Stream, err = dev.NewStream(); err != nil {
		return nil, err
	}
	if t.End, err = dev.NewEvent(false); err != nil {
		return nil, err
	}
	for range Slots {
		e, err := dev.NewIPCEvent()
		if err != nil {
			return nil, err
		}
		t.Slots = append(t.Slots, e)
	}
	return t, nil
}

// PutRef writes t's reference (RefBytes) into w, for the receiver's
// OpenRx.
func (t *Tx) PutRef(w []byte) error {
	ref := t.Mem.Ref()
	for i, v := range []uint64{uint64(ref.PID), uint64(ref.FD), uint64(ref.Len), ref.Ino} {
		binary.LittleEndian.PutUint64(w[8*i:], v)
	}
	for k, e := range t.Slots {
		h, err := e.IPCHandle()
		if err != nil {
			return err
		}
		copy(w[refHeader+k*gpu.IPCHandleSize:], h)
	}
	return nil
}

// Offered reports whether the reference at the start of w describes a
// buffer (an all-zero reference is no offer).
func Offered(w []byte) bool { return binary.LittleEndian.Uint64(w[16:]) != 0 }

// Close waits for the copies, then releases the stream, the events and the
// staging buffer (nil entries are skipped).
func (t *Tx) Close() error {
	return closeAll(t.Stream, append([]*gpu.Event{t.End}, t.Slots...), t.Mem)
}

// Rx is the receiving end of one ordered pair: the peer's staging buffer
// mapped here, the copy stream that empties it (H2D), its join event, and
// the peer's slot events opened here.
type Rx struct {
	Mem    *gpu.SharedHost
	Stream *gpu.Stream
	End    *gpu.Event
	Slots  []*gpu.Event
}

// OpenRx maps the staging buffer that the reference w (from the peer's
// PutRef) describes and opens its slot events.
func OpenRx(dev *gpu.Device, w []byte) (r *Rx, err error) {
	le := binary.LittleEndian
	ref := gpu.SharedHostRef{PID: int(le.Uint64(w)), FD: int(le.Uint64(w[8:])), Len: int(le.Uint64(w[16:])), Ino: le.Uint64(w[24:])}
	if ref.Len > 1<<34 {
		return nil, fmt.Errorf("staging buffer of %d bytes", ref.Len)
	}
	r = &Rx{}
	defer func() {
		if err != nil {
			r.Close()
			r = nil
		}
	}()
	if r.Mem, err = dev.OpenSharedHost(ref); err != nil {
		return nil, err
	}
	if r.Stream, err = dev.NewStream(); err != nil {
		return nil, err
	}
	if r.End, err = dev.NewEvent(false); err != nil {
		return nil, err
	}
	handles := w[refHeader:]
	for k := range Slots {
		e, err := dev.OpenIPCEvent(handles[k*gpu.IPCHandleSize : (k+1)*gpu.IPCHandleSize])
		if err != nil {
			return nil, err
		}
		r.Slots = append(r.Slots, e)
	}
	return r, nil
}

// Close waits for the copies, then releases the stream, the events and the
// mapping (nil entries are skipped).
func (r *Rx) Close() error {
	return closeAll(r.Stream, append([]*gpu.Event{r.End}, r.Slots...), r.Mem)
}

// closeAll synchronizes s, then closes it, the events and the staging
// mapping (nil entries are skipped); it returns the first error.
func closeAll(s *gpu.Stream, evs []*gpu.Event, mem *gpu.SharedHost) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if s != nil {
		keep(s.Synchronize())
		keep(s.Close())
	}
	for _, e := range evs {
		if e != nil {
			keep(e.Close())
		}
	}
	if mem != nil {
		keep(mem.Close())
	}
	return first
}
