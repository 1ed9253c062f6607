package pcie

import (
	"bytes"
	"testing"

	"github.com/flexlink/flexlink/gpu/gpufake"
)

// TestStaging: a reference written by one device's Tx opens as an Rx on
// another, the two map the same memory, the slot events order a D2H on
// the sender before an H2D on the receiver, and Close gives everything
// back.
func TestStaging(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	d0, _ := drv.Device(0)
	d1, _ := drv.Device(1)

	ref := make([]byte, RefBytes)
	if Offered(ref) {
		t.Fatal("a zero reference counts as an offer")
	}
	tx, err := NewTx(d0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.PutRef(ref); err != nil {
		t.Fatal(err)
	}
	if !Offered(ref) {
		t.Fatal("a written reference is no offer")
	}
	rx, err := OpenRx(d1, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(tx.Slots) != Slots || len(rx.Slots) != Slots || rx.Mem.Len() != tx.Mem.Len() {
		t.Fatalf("%d and %d slots, %d and %d bytes", len(tx.Slots), len(rx.Slots), tx.Mem.Len(), rx.Mem.Len())
	}

	want := bytes.Repeat([]byte{1, 2, 3, 4, 5}, 1000)
	src, err := d0.Alloc(len(want))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := d1.Alloc(len(want))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Free()
	defer dst.Free()
	if err := tx.Stream.CopyHtoD(src, want); err != nil {
		t.Fatal(err)
	}
	if err := tx.Stream.CopyDtoH(tx.Mem.Bytes()[:len(want)], src); err != nil {
		t.Fatal(err)
	}
	if err := tx.Stream.Record(tx.Slots[0]); err != nil {
		t.Fatal(err)
	}
	if err := rx.Stream.Wait(rx.Slots[0]); err != nil {
		t.Fatal(err)
	}
	if err := rx.Stream.CopyHtoD(dst, rx.Mem.Bytes()[:len(want)]); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if err := rx.Stream.CopyDtoH(got, dst); err != nil {
		t.Fatal(err)
	}
	if err := rx.Stream.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the receiver's copy differs from the sender's data")
	}
	if err := rx.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRxRejects: a reference to an absurd buffer is refused before
// anything is opened.
func TestOpenRxRejects(t *testing.T) {
	drv, err := gpufake.Open(gpufake.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	d1, _ := drv.Device(1)
	ref := make([]byte, RefBytes)
	ref[16+4] = 8 // length 1<<35
	if _, err := OpenRx(d1, ref); err == nil {
		t.Fatal("OpenRx accepted a staging buffer of 32 GiB")
	}
}
