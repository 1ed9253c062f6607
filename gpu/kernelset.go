package gpu

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/flexlink/flexlink/dtype"
	"github.com/flexlink/flexlink/gpu/internal/cu"
	"github.com/flexlink/flexlink/gpu/kernels"
	"github.com/flexlink/flexlink/internal/errs"
)

// The kernels a device has loaded, family by family (gpu/kernels): a
// family is loaded the first time one of its kernels is launched, so a
// process that reduces only float32 loads the common and f32 families, and
// one whose calls need no kernel (one rank, host buffers, copies on the
// copy engines) loads none. Each load is timed and logged at INFO
// (FLEXLINK_DEBUG=INFO) and listed by Device.KernelLoads.
//
// Where the kernels come from, in order: FLEXLINK_GPU_PTX (one PTX file
// holding every family, for kernel development), FLEXLINK_GPU_KERNELS (a
// directory laid out like gpu/kernels/fatbin), the fatbins embedded in the
// binary.

// errNoBinaryForGPU is CUDA_ERROR_NO_BINARY_FOR_GPU.
const errNoBinaryForGPU cu.Result = 209

// typeKernels is one dtype's kernels; a nil entry is one the loaded code
// lacks, and missing (missingPreMul) says why.
type typeKernels struct {
	reduce, flag, flagrs   [numReduceOps]*Function // reduceOps order
	scale, premul          *Function
	missing, missingPreMul error
}

// commonKernels is the common family: byte copies and the flag gather.
type commonKernels struct{ copy, copy2, gather *Function }

// KernelLoad is one module a device loaded.
type KernelLoad struct {
	Family string        // "common", a dtype's suffix ("f32"), or "all" (one PTX file)
	From   string        // "embedded", a directory, or a PTX file's path
	Code   string        // "sass" (compiled for this GPU), "ptx" (compiled by the driver now)
	Bytes  int           // the image's size
	Took   time.Duration // cuModuleLoadData, including any PTX compile
}

// kernelSet is what a device loaded; guarded by kernelCache.mu.
type kernelSet struct {
	maxGrid uint32
	single  *Module // one module for every family (a PTX file)
	mods    []*Module
	types   []*typeKernels // by dtype; nil until its family is loaded
	typeErr []error        // a family that failed to load is not retried
	com     *commonKernels
	comErr  error
	loads   []KernelLoad
}

// kernelsLocked returns dv's kernel set, made on first use (nothing loaded).
func (dv *Device) kernelsLocked() *kernelSet {
	if dv.kernels.set == nil {
		dv.kernels.set = &kernelSet{maxGrid: uint32(max(1, dv.info.sms) * blocksPerSM),
			types: make([]*typeKernels, numTypes), typeErr: make([]error, numTypes)}
	}
	return dv.kernels.set
}

// typeKernels returns dt's kernels, loading its family on first use. The
// error wraps errs.ErrNotSupported when the kernels cannot run here.
func (dv *Device) typeKernels(dt dtype.DType) (*typeKernels, uint32, error) {
	if !dt.Valid() || int(dt) >= numTypes || kernelType(dt) == "" {
		return nil, 0, fmt.Errorf("%s: no kernels for %s: %w", dv, dt, errs.ErrNotSupported)
	}
	dv.kernels.mu.Lock()
	defer dv.kernels.mu.Unlock()
	k := dv.kernelsLocked()
	if t := k.types[dt]; t != nil {
		return t, k.maxGrid, t.missing
	}
	if err := k.typeErr[dt]; err != nil {
		return nil, 0, err
	}
	t, err := dv.loadType(k, dt)
	if err != nil {
		k.typeErr[dt] = err
		return nil, 0, err
	}
	k.types[dt] = t
	return t, k.maxGrid, t.missing
}

// commonKernels returns the common family, loading it on first use.
func (dv *Device) commonKernels() (*commonKernels, uint32, error) {
	dv.kernels.mu.Lock()
	defer dv.kernels.mu.Unlock()
	k := dv.kernelsLocked()
	if k.com != nil || k.comErr != nil {
		return k.com, k.maxGrid, k.comErr
	}
	mod, err := dv.loadFamily(k, kernels.Common)
	if err == nil {
		c := &commonKernels{}
		if c.copy, err = mod.Function(CopyKernelName); err == nil {
			if c.copy2, err = mod.Function(Copy2KernelName); err == nil {
				c.gather, err = mod.Function(FlagGatherKernelName)
			}
		}
		if err == nil {
			k.com = c
		}
	}
	if err != nil {
		k.comErr = fmt.Errorf("%s: kernels: %w", dv, err)
	}
	return k.com, k.maxGrid, k.comErr
}

// loadType loads dt's family and looks its kernels up. Kernels the code
// lacks (a PTX file older than them, float8 below sm_90) leave the type
// missing, with the reason; the first eight dtypes must be complete.
func (dv *Device) loadType(k *kernelSet, dt dtype.DType) (*typeKernels, error) {
	if dt.IsFloat8() && dv.info.major < 9 {
		return &typeKernels{missing: missingKernels(dv, dt, "reductions", nil), missingPreMul: missingKernels(dv, dt, "premul", nil)}, nil
	}
	mod, err := dv.loadFamily(k, kernelType(dt))
	if err != nil {
		return nil, fmt.Errorf("%s: %s kernels: %w", dv, dt, err)
	}
	t := &typeKernels{}
	if err := t.lookup(mod, dt); err != nil {
		if kernelRequired(dt) {
			return nil, fmt.Errorf("%s kernels: %w", dt, err)
		}
		t.reduce, t.flag, t.flagrs, t.scale = [numReduceOps]*Function{}, [numReduceOps]*Function{}, [numReduceOps]*Function{}, nil
		t.missing = missingKernels(dv, dt, "reductions", err)
	}
	if t.premul, err = mod.Function(PreMulKernelName(dt)); err != nil {
		t.missingPreMul = missingKernels(dv, dt, "premul", err)
	}
	return t, nil
}

// lookup finds dt's reduce, scale and flag kernels in mod.
func (t *typeKernels) lookup(mod *Module, dt dtype.DType) error {
	var err error
	for i, op := range ReduceOps() {
		if t.reduce[i], err = mod.Function(ReduceKernelName(dt, op)); err != nil {
			return err
		}
		if t.flag[i], err = mod.Function(FlagKernelName(dt, op)); err != nil {
			return err
		}
		if t.flagrs[i], err = mod.Function(FlagRSKernelName(dt, op)); err != nil {
			return err
		}
	}
	t.scale, err = mod.Function(ScaleKernelName(dt))
	return err
}

// loadFamily loads one family's module (or the one module every family
// shares), timing and logging the load.
func (dv *Device) loadFamily(k *kernelSet, family string) (*Module, error) {
	if k.single != nil {
		return k.single, nil
	}
	img, err := dv.familyImage(family)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	mod, err := dv.LoadModule(img.bytes)
	took := time.Since(t0)
	if err != nil {
		var ce *cu.Error
		if errors.As(err, &ce) && (ce.Code == cu.ErrorUnsupportedPTX || ce.Code == errNoBinaryForGPU || ce.Code == cu.ErrorInvalidImage) {
			return nil, fmt.Errorf("%s kernels from %s: the driver (CUDA %d.%d) cannot load them on compute capability %d.%d; flexlink's kernels need a driver for CUDA 13.0 (r580) or later: %w: %w",
				img.family, img.from, dv.drv.version/1000, dv.drv.version%1000/10, dv.info.major, dv.info.minor, err, errs.ErrNotSupported)
		}
		return nil, fmt.Errorf("%s kernels from %s: %w", img.family, img.from, err)
	}
	if img.family == "all" {
		k.single = mod
	}
	k.mods = append(k.mods, mod)
	l := KernelLoad{Family: img.family, From: img.from, Code: img.code, Bytes: len(img.bytes), Took: took}
	k.loads = append(k.loads, l)
	dv.drv.logger().Info("loaded GPU kernels", "gpu", dv.ord, "family", l.Family, "code", l.Code,
		"from", l.From, "bytes", l.Bytes, "took", l.Took.Round(time.Microsecond))
	if img.code == "ptx" && img.family != "all" {
		dv.drv.logger().Info("no compiled kernels for this GPU: the driver compiled their PTX (cached in ~/.nv/ComputeCache unless CUDA_CACHE_DISABLE=1)",
			"gpu", dv.ord, "compute_capability", fmt.Sprintf("%d.%d", dv.info.major, dv.info.minor))
	}
	return mod, nil
}

// image is one module to load.
type image struct {
	family, from, code string
	bytes              []byte
}

// familyImage finds family's code for this device.
func (dv *Device) familyImage(family string) (image, error) {
	if p := dv.drv.ptxFile; p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return image{}, fmt.Errorf("kernels (FLEXLINK_GPU_PTX): %w", err)
		}
		return image{family: "all", from: p, code: "ptx", bytes: b}, nil
	}
	var set *kernels.Set
	if d := dv.drv.kernelDir; d != "" {
		s, err := kernels.Dir(d)
		if err != nil {
			return image{}, fmt.Errorf("FLEXLINK_GPU_KERNELS: %w", err)
		}
		set = s
	} else if s, ok := kernels.Embedded(); ok {
		set = s
	}
	if set == nil {
		return image{}, fmt.Errorf("this binary carries no kernels (built with the tag flexlink_noptx): set FLEXLINK_GPU_KERNELS to a directory like gpu/kernels/fatbin: %w", errs.ErrNotSupported)
	}
	m := set.Manifest()
	if !m.Usable(dv.info.major, dv.info.minor) {
		return image{}, fmt.Errorf("kernels need compute capability 8.0 or later, have %d.%d: %w", dv.info.major, dv.info.minor, errs.ErrNotSupported)
	}
	b, err := set.Fatbin(family)
	if err != nil {
		return image{}, err
	}
	code := "ptx"
	if m.Compiled(dv.info.major, dv.info.minor) {
		code = "sass"
	}
	return image{family: family, from: set.Where(), code: code, bytes: b}, nil
}

// KernelLoads lists the modules this device has loaded, in order.
func (dv *Device) KernelLoads() []KernelLoad {
	dv.kernels.mu.Lock()
	defer dv.kernels.mu.Unlock()
	if dv.kernels.set == nil {
		return nil
	}
	return append([]KernelLoad(nil), dv.kernels.set.loads...)
}

// close unloads every module of the set.
func (k *kernelSet) close() error {
	var first error
	for _, m := range k.mods {
		if err := m.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// LoadKernels loads every kernel family now (the common one and each
// datatype's) instead of on first use. A module load waits for the
// context's work to finish, so code that may load kernels while a stream
// of the context waits on work it has yet to enqueue must load them first.
// Families that cannot run here (float8 below sm_90) are not errors.
func (dv *Device) LoadKernels() error {
	if _, _, err := dv.commonKernels(); err != nil {
		return err
	}
	for dt := dtype.DType(0); int(dt) < numTypes; dt++ {
		if !dt.Valid() || kernelType(dt) == "" {
			continue
		}
		if _, _, err := dv.typeKernels(dt); err != nil && !errors.Is(err, errs.ErrNotSupported) {
			return err
		}
	}
	return nil
}
