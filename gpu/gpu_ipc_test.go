package gpu_test

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/flexlink/flexlink/gpu"
)

// CUDA IPC needs two processes (the driver refuses a handle in the process
// that made it), so the test binary runs itself as the second one: TestMain
// sees the ipcChildArg argument and runs ipcChild instead of the tests.

const ipcChildArg = "gpu-ipc-child"

func TestMain(m *testing.M) {
	flag.Parse()
	if a := flag.Args(); len(a) > 0 && a[0] == ipcChildArg {
		if err := ipcChild(a[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "ipc child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// gpuIPC exports a buffer and an event from GPU0, lets a child process open
// both on the last GPU, wait for the event, check the data and overwrite
// it, then checks the overwrite here.
func gpuIPC(t *testing.T, r *rig) {
	const n = 16<<20 + 7
	dv, s := r.devs[0], r.streams[0]
	buf := r.alloc(t, dv, n)
	ev, err := dv.NewIPCEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if err := s.CopyHtoD(buf, pattern(n, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ev); err != nil {
		t.Fatal(err)
	}
	mh, err := buf.IPCHandle()
	if err != nil {
		t.Fatal(err)
	}
	eh, err := ev.IPCHandle()
	if err != nil {
		t.Fatal(err)
	}
	if len(mh) != gpu.IPCHandleSize || len(eh) != gpu.IPCHandleSize {
		t.Fatalf("handles of %d and %d bytes", len(mh), len(eh))
	}
	peer := len(r.devs) - 1
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", ipcChildArg,
		strconv.Itoa(peer), hex.EncodeToString(mh), strconv.Itoa(n), hex.EncodeToString(eh))
	out, err := cmd.CombinedOutput()
	t.Logf("child on gpu %d: %s", peer, bytes.TrimSpace(out))
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	if !bytes.Equal(r.download(t, buf), pattern(n, 2)) {
		t.Error("the child's write through the IPC mapping is not visible here")
	}
}

// ipcChild is the second process: args are device, memory handle (hex),
// length, event handle (hex).
func ipcChild(args []string) error {
	if len(args) != 4 {
		return fmt.Errorf("want 4 arguments, got %q", args)
	}
	ord, _ := strconv.Atoi(args[0])
	n, _ := strconv.Atoi(args[2])
	mh, err1 := hex.DecodeString(args[1])
	eh, err2 := hex.DecodeString(args[3])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("bad handles: %v %v", err1, err2)
	}
	drv, err := gpu.Open()
	if err != nil {
		return err
	}
	defer drv.Close()
	dv, err := drv.Device(ord)
	if err != nil {
		return err
	}
	ev, err := dv.OpenIPCEvent(eh)
	if err != nil {
		return err
	}
	defer ev.Close()
	if err := ev.Synchronize(); err != nil {
		return err
	}
	buf, err := dv.OpenIPCBuffer(mh, n)
	if err != nil {
		return err
	}
	defer buf.Free()
	s, err := dv.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	got := make([]byte, n)
	if err := s.CopyDtoH(got, buf); err != nil {
		return err
	}
	if !bytes.Equal(got, pattern(n, 1)) {
		return fmt.Errorf("data read through the IPC mapping differs")
	}
	if err := s.CopyHtoD(buf, pattern(n, 2)); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	fmt.Printf("opened %d bytes and an event from the parent on %s; read and wrote them\n", n, dv)
	return nil
}
