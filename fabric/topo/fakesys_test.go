package topo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSys builds a sysfs tree in a temporary directory, with relative
// symbolic links as the kernel makes them.
type fakeSys struct {
	t    *testing.T
	root string
}

func newFakeSys(t *testing.T) *fakeSys {
	t.Helper()
	return &fakeSys{t: t, root: t.TempDir()}
}

func (f *fakeSys) file(rel, content string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeSys) dir(rel string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Join(f.root, rel), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// link makes rel a relative symbolic link to target (both under root).
func (f *fakeSys) link(rel, target string) {
	f.t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	r, err := filepath.Rel(filepath.Dir(p), filepath.Join(f.root, target))
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(r, p); err != nil {
		f.t.Fatal(err)
	}
}

// pci creates a PCI function at devices/<path> (path is the chain from the
// root complex, "pci0000:00/0000:00:01.0/0000:01:00.0") with a
// bus/pci/devices link and the given attribute files.
func (f *fakeSys) pci(path string, attrs map[string]string) string {
	f.t.Helper()
	dev := "devices/" + path
	f.dir(dev)
	bdf := path[strings.LastIndex(path, "/")+1:]
	f.link("bus/pci/devices/"+bdf, dev)
	for k, v := range attrs {
		f.file(dev+"/"+k, v)
	}
	return dev
}

// netdev adds class/net/<name> for a device directory (empty: virtual).
func (f *fakeSys) netdev(name, devDir, speed string) {
	f.t.Helper()
	if devDir == "" {
		f.dir("devices/virtual/net/" + name)
		f.link("class/net/"+name, "devices/virtual/net/"+name)
		return
	}
	f.dir(devDir + "/net/" + name)
	f.link(devDir+"/net/"+name+"/device", devDir)
	f.link("class/net/"+name, devDir+"/net/"+name)
	if speed != "" {
		f.file(devDir+"/net/"+name+"/speed", speed)
	}
}

// rdma adds class/infiniband/<name> with ports (number → rate) for a PCI
// device directory.
func (f *fakeSys) rdma(name, devDir string, ports map[string]string) {
	f.t.Helper()
	d := devDir + "/infiniband/" + name
	f.dir(d)
	f.link(d+"/device", devDir)
	f.link("class/infiniband/"+name, d)
	for p, rate := range ports {
		f.file(d+"/ports/"+p+"/rate", rate)
		f.file(d+"/ports/"+p+"/link_layer", "InfiniBand")
	}
}

func (f *fakeSys) numaNode(id, cpus string) {
	f.file("devices/system/node/node"+id+"/cpulist", cpus)
}
