package gpu

import (
	"fmt"
	"sync"

	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/internal/errs"
)

// Module is PTX (or a cubin) loaded into one device's context; the driver
// JIT-compiles PTX for the device when it loads it.
type Module struct {
	dev *Device
	h   cu.Module

	mu     sync.Mutex
	closed bool
}

// Function is one kernel of a Module.
type Function struct {
	mod  *Module
	h    cu.Function
	name string
}

// loadModule is Device.LoadModule.
func loadModule(dv *Device, image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("%s: load module: empty image", dv)
	}
	var h cu.Module
	err := dv.do(func(api cu.API) (e error) { h, e = api.ModuleLoadData(image); return })
	if err != nil {
		return nil, fmt.Errorf("%s: load module: %w", dv, err)
	}
	return &Module{dev: dv, h: h}, nil
}

// Function looks up the kernel called name (an extern "C" name).
func (m *Module) Function(name string) (*Function, error) {
	var f cu.Function
	// Loaded now, not at its first launch (the driver's lazy loading): a
	// load may wait for the context to go idle, so a first launch from the
	// enqueue-and-return engine, while a stream of the context waits for
	// the engine, would wait forever (seen on an H200: a 4-rank DDP job).
	err := m.dev.do(func(api cu.API) (e error) {
		if f, e = api.ModuleGetFunction(m.h, name); e == nil {
			e = api.FuncLoad(f)
		}
		return
	})
	if err != nil {
		return nil, fmt.Errorf("%s: kernel %s: %w", m.dev, name, err)
	}
	return &Function{mod: m, h: f, name: name}, nil
}

// Close unloads the module; its Functions become invalid. A second Close
// returns an error wrapping errs.ErrClosed.
func (m *Module) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("%s: unload module: %w", m.dev, errs.ErrClosed)
	}
	if err := m.dev.do(func(api cu.API) error { return api.ModuleUnload(m.h) }); err != nil {
		return fmt.Errorf("%s: unload module: %w", m.dev, err)
	}
	m.closed = true
	return nil
}

// Name is the kernel's name.
func (f *Function) Name() string { return f.name }
