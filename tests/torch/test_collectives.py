"""test_collectives: torch.distributed collectives on the NCCL backend,
checked element by element against references computed independently
(each rank rebuilds every rank's input on the CPU and reduces in int64 or
float64; a few checks also run the same op through a gloo group on CPU
copies).

    flexrun -np N --oversubscribe --nccl python3 tests/torch/test_collectives.py [--only S,...] [--lazy] [--quick] [--label L]

Sections (default: all but abort, which runs on its own because a library
that ends the whole job on a sub-group abort would hide the rest):
  basic     every dtype torch maps to NCCL x all_reduce (SUM AVG MAX MIN
            PRODUCT), all_gather_into_tensor, reduce_scatter_tensor,
            broadcast, reduce, all_to_all_single (equal and uneven splits,
            zeros included), gather, scatter, barrier; float8 and uint32/64
            where torch lets them through (SKIP naming torch's refusal
            otherwise); 32 MiB float32 ops; random float32 vs gloo
  p2p       send/recv pairs, batch_isend_irecv ring and all-to-all
  premul    _make_nccl_premul_sum with a python float and a device tensor,
            float32/float16/bfloat16/float64, all_reduce and reduce_scatter
  realloc   a buffer freed (empty_cache) and allocated again at the same
            address, same and other sizes, all_reduce/all_gather/broadcast
            on it, every element checked, many rounds
  groups    new_group and split_group with ranks left out (NOCOLOR), the
            subgroup and the world after
  threads   two threads, two process groups, at once
  estimator dist._time_estimator (ncclGroupSimulateEnd), then a collective
  abort     _abort_process_group of a subgroup, then the world and a
            sibling group still work
"""
import os
import struct
import sys
import threading
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Fail, Skip, Suite, close, compare, parse_args, torch_refuses  # noqa: E402

SECTIONS = ["basic", "p2p", "premul", "realloc", "groups", "threads", "unsigned", "estimator"]

args = parse_args(sections=SECTIONS)
S = Suite("test_collectives", lazy=args.lazy, label=args.label)
R, W, dev = S.rank, S.world, S.device
Op = dist.ReduceOp

F32, F16, BF16, F64 = torch.float32, torch.float16, torch.bfloat16, torch.float64
FP8 = [d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d is not None]
U32, U64 = getattr(torch, "uint32", None), getattr(torch, "uint64", None)
FLOATS = [F32, F16, BF16, F64]
BASE = [F32, F16, BF16, F64, torch.int32, torch.int64, torch.int8, torch.uint8]
UNS = [d for d in (U32, U64) if d is not None]
UNSIGNED = [torch.uint8] + UNS


def dname(dt):
    return str(dt).replace("torch.", "")


# ---- building inputs and reading results ---------------------------------

def to_dev(x, dt):
    """x: int64 CPU tensor of small values -> a cuda tensor of dtype dt holding them."""
    if dt in FP8:
        return x.to(F32).to(dev).to(dt)
    if dt is U32:
        return x.to(torch.int32).to(dev).view(U32)
    if dt is U64:
        return x.to(dev).view(U64)
    return x.to(dt).to(dev)


def from_dev(t, dt):
    """A cuda tensor of dtype dt -> int64 (integers) or float64 CPU tensor."""
    if dt in FP8 or dt in (F32, F16, BF16):
        return t.float().cpu().double()
    if dt is F64:
        return t.cpu()
    if dt is U32:
        return t.view(torch.int32).cpu().long() & 0xFFFFFFFF
    if dt is U64:
        return t.view(torch.int64).cpu()
    return t.cpu().long()


def want_as(x, dt):
    """The int64 reference in the form from_dev returns."""
    return x.double() if (dt in FP8 or dt in FLOATS) else x


def empty(n, dt):
    """An output buffer filled with a value no check expects there."""
    return to_dev(torch.full((n,), 12 if dt in FP8 else 99, dtype=torch.int64), dt)


def idx(n):
    return torch.arange(n, dtype=torch.int64)


def red_vals(n, r, dt, salt=0):
    """SUM/MAX/MIN inputs: small values, exact in every dtype even summed over 4 ranks."""
    b = idx(n) * 7 + r * 3 + salt * 5
    return b % 5 if dt in UNSIGNED else b % 5 - 2


def prod_vals(n, r, dt, salt=0):
    i = idx(n) + r + salt
    if dt in UNSIGNED:
        return torch.tensor([1, 2], dtype=torch.int64)[i % 2]
    return torch.tensor([1, 2, -1], dtype=torch.int64)[i % 3]


def avg_offsets(world):
    """Per-rank offsets summing to 0, so AVG of v + d_r is exactly v in every dtype."""
    d = [] if world % 2 == 0 else [0]
    k = 1
    while len(d) < world:
        d += [k, -k]
        k += 1
    return d[:world]


def avg_vals(n, r, dt, salt=0):
    b = idx(n) * 7 + salt * 5
    v = b % 3 + 2 if dt in UNSIGNED else b % 5 - 2
    return v + avg_offsets(W)[r]


def avg_want(n, dt, salt=0):
    b = idx(n) * 7 + salt * 5
    return b % 3 + 2 if dt in UNSIGNED else b % 5 - 2


def move_vals(n, r, dt, salt=0):
    """Data-movement inputs: distinct per rank and index, exact in the dtype."""
    m = 8 if dt in FP8 else 97
    return (idx(n) * 7 + r * 3 + salt * 11) % m


OPS = [("sum", Op.SUM), ("avg", Op.AVG), ("max", Op.MAX), ("min", Op.MIN), ("product", Op.PRODUCT)]


def inputs_for(opname, n, r, dt, salt=0):
    if opname == "product":
        return prod_vals(n, r, dt, salt)
    if opname == "avg":
        return avg_vals(n, r, dt, salt)
    return red_vals(n, r, dt, salt)


def reduce_ref(opname, xs, n, dt, salt=0):
    if opname == "avg":
        return avg_want(n, dt, salt)
    st = torch.stack(xs)
    if opname == "sum":
        return st.sum(0)
    if opname == "product":
        return st.prod(0)
    if opname == "max":
        return st.max(0).values
    return st.min(0).values


def guard_dtype(fn):
    """Run fn; a refusal by torch itself (not by the library) becomes a SKIP."""
    try:
        return fn()
    except (Fail, Skip):
        raise
    except Exception as e:  # noqa: BLE001
        if torch_refuses(e, "float8", "unsupported", "not supported", "data type", "dtype", "uint32", "uint64", "UInt"):
            raise Skip(f"torch refuses it before the library: {str(e).splitlines()[0][:200]}")
        raise


SIZES_AR = [1, 1027, (1 << 20) + 3]
SIZES = [1027, (1 << 18) + 5]
if args.quick:
    SIZES_AR = [1027, (1 << 20) + 3]
    SIZES = [(1 << 18) + 5]


# ---- sections --------------------------------------------------------------

def warmup():
    """The first collective: the library may compile its kernels here."""
    t = torch.full((1 << 16,), float(R + 1), device=dev)
    dist.all_reduce(t)
    want = W * (W + 1) / 2
    if not bool((t == want).all().item()):
        raise Fail(f"first all_reduce: got {t[:4].tolist()}..., want {want}")


def torch_scatter_leaves_group_open():
    raise Skip("torch 2.11 leaves an NCCL group open when it refuses this type in scatter (its bug; NCCL is affected the same)")


def section_basic(dts=None, fp8=None):
    # torch 2.11 refuses uint32/uint64 in some ops only after it has started
    # an NCCL group (seen on the GPU machine: every later call on the thread
    # is then deferred, with NCCL too), so they run last, in section unsigned.
    dts = BASE if dts is None else dts
    fp8 = FP8 if fp8 is None else fp8
    if args.quick:
        dts, fp8 = [F32, BF16, torch.int64], []

    def all_reduce(opname, op, dt):
        def run():
            for n in SIZES_AR:
                xs = [inputs_for(opname, n, r, dt) for r in range(W)]
                t = to_dev(xs[R], dt)
                dist.all_reduce(t, op=op)
                compare(from_dev(t, dt), want_as(reduce_ref(opname, xs, n, dt), dt), f"n={n}")
        return lambda: guard_dtype(run)

    for dt in dts + fp8:
        for opname, op in OPS:
            S.check(f"all_reduce.{opname}.{dname(dt)}", all_reduce(opname, op, dt))

    def all_gather(dt):
        def run():
            for n in SIZES:
                out = empty(W * n, dt)
                dist.all_gather_into_tensor(out, to_dev(move_vals(n, R, dt), dt))
                want = torch.cat([move_vals(n, r, dt) for r in range(W)])
                compare(from_dev(out, dt), want_as(want, dt), f"n={n}")
        return lambda: guard_dtype(run)

    def broadcast(dt):
        def run():
            src = W - 1
            for n in SIZES:
                t = to_dev(move_vals(n, R, dt), dt)
                dist.broadcast(t, src=src)
                compare(from_dev(t, dt), want_as(move_vals(n, src, dt), dt), f"n={n} src={src}")
        return lambda: guard_dtype(run)

    for dt in dts + fp8:
        S.check(f"all_gather_into_tensor.{dname(dt)}", all_gather(dt))
        S.check(f"broadcast.{dname(dt)}", broadcast(dt))

    def reduce_scatter(opname, op, dt):
        def run():
            for n in SIZES:
                xs = [inputs_for(opname, W * n, r, dt, salt=1) for r in range(W)]
                out = empty(n, dt)
                dist.reduce_scatter_tensor(out, to_dev(xs[R], dt), op=op)
                full = reduce_ref(opname, xs, W * n, dt, salt=1)
                compare(from_dev(out, dt), want_as(full[R * n:(R + 1) * n], dt), f"n={n}")
        return lambda: guard_dtype(run)

    def reduce(dt):
        def run():
            dst = W - 1
            for n in SIZES:
                xs = [red_vals(n, r, dt, salt=2) for r in range(W)]
                t = to_dev(xs[R], dt)
                dist.reduce(t, dst=dst, op=Op.SUM)
                if R == dst:
                    compare(from_dev(t, dt), want_as(torch.stack(xs).sum(0), dt), f"n={n} dst={dst}")
        return lambda: guard_dtype(run)

    def a2a_equal(dt):
        def run():
            for n in SIZES:
                inp = torch.cat([move_vals(n, R, dt, salt=j) for j in range(W)])
                out = empty(W * n, dt)
                dist.all_to_all_single(out, to_dev(inp, dt))
                want = torch.cat([move_vals(n, j, dt, salt=R) for j in range(W)])
                compare(from_dev(out, dt), want_as(want, dt), f"n={n} per peer")
        return lambda: guard_dtype(run)

    def count(src, dst, m):
        # uneven splits, some of them empty (1 -> 0, 0 -> 3, 2 -> 2, ...)
        if (src + 2 * dst) % 5 == 1:
            return 0
        return ((src * 3 + dst * 5) % 4 + 1) * m + (src + dst) % 3

    def a2a_uneven(dt):
        def run():
            for m in (1, 300, 40000):
                ins = [count(R, j, m) for j in range(W)]
                outs = [count(j, R, m) for j in range(W)]
                inp = torch.cat([move_vals(c, R, dt, salt=j) for j, c in enumerate(ins)])
                out = empty(sum(outs), dt)
                dist.all_to_all_single(out, to_dev(inp, dt), output_split_sizes=outs, input_split_sizes=ins)
                want = torch.cat([move_vals(c, j, dt, salt=R) for j, c in enumerate(outs)])
                compare(from_dev(out, dt), want_as(want, dt), f"splits in={ins} out={outs}")
        return lambda: guard_dtype(run)

    def gather(dt):
        def run():
            dst = W - 1
            for n in SIZES:
                lst = [empty(n, dt) for _ in range(W)] if R == dst else None
                dist.gather(to_dev(move_vals(n, R, dt, salt=3), dt), gather_list=lst, dst=dst)
                if R == dst:
                    for r in range(W):
                        compare(from_dev(lst[r], dt), want_as(move_vals(n, r, dt, salt=3), dt), f"n={n} from rank {r}")
        return lambda: guard_dtype(run)

    def scatter(dt):
        def run():
            src = 0
            for n in SIZES:
                lst = [to_dev(move_vals(n, j, dt, salt=4), dt) for j in range(W)] if R == src else None
                out = empty(n, dt)
                dist.scatter(out, scatter_list=lst, src=src)
                compare(from_dev(out, dt), want_as(move_vals(n, R, dt, salt=4), dt), f"n={n}")
        return lambda: guard_dtype(run)

    for dt in dts:
        S.check(f"reduce_scatter_tensor.sum.{dname(dt)}", reduce_scatter("sum", Op.SUM, dt))
        S.check(f"reduce_scatter_tensor.max.{dname(dt)}", reduce_scatter("max", Op.MAX, dt))
        if dt in FLOATS:
            S.check(f"reduce_scatter_tensor.avg.{dname(dt)}", reduce_scatter("avg", Op.AVG, dt))
        S.check(f"reduce.sum.{dname(dt)}", reduce(dt))
        S.check(f"all_to_all_single.equal.{dname(dt)}", a2a_equal(dt))
        S.check(f"all_to_all_single.uneven.{dname(dt)}", a2a_uneven(dt))
        S.check(f"gather.{dname(dt)}", gather(dt))
        if dt in UNS:
            # torch 2.11's scatter starts an NCCL group, then refuses the
            # type and never ends the group: every later call on the thread
            # is deferred, with NCCL as with flexlink (diag_groups.py).
            S.check(f"scatter.{dname(dt)}", torch_scatter_leaves_group_open)
        else:
            S.check(f"scatter.{dname(dt)}", scatter(dt))

    def barrier():
        time.sleep(0.15 * R)
        enter = time.time()
        dist.barrier()
        leave = time.time()
        times = [None] * W
        dist.all_gather_object(times, (enter, leave), group=S.gloo)
        last_in = max(t[0] for t in times)
        first_out = min(t[1] for t in times)
        if first_out + 0.01 < last_in:
            raise Fail(f"a rank left the barrier {last_in - first_out:.3f}s before the last one entered")
    S.check("barrier", barrier)

    # Large buffers (32 MiB float32): the library's big-message paths.
    N = 8 << 20

    def gpu_vals(n, r, salt=0):
        i = torch.arange(n, device=dev, dtype=torch.int64)
        return (i * 7 + r * 3 + salt * 5) % 11 - 5

    def big_all_reduce():
        t = gpu_vals(N, R).float()
        dist.all_reduce(t)
        want = sum(gpu_vals(N, r) for r in range(W))
        wrong = int((t.long() != want).sum().item())
        if wrong:
            raise Fail(f"{wrong} of {N} elements wrong")

    def big_broadcast():
        t = gpu_vals(N, R).float()
        dist.broadcast(t, src=W - 1)
        wrong = int((t.long() != gpu_vals(N, W - 1)).sum().item())
        if wrong:
            raise Fail(f"{wrong} of {N} elements wrong")

    def big_reduce():
        t = gpu_vals(N, R, 1).float()
        dist.reduce(t, dst=0)
        if R == 0:
            wrong = int((t.long() != sum(gpu_vals(N, r, 1) for r in range(W))).sum().item())
            if wrong:
                raise Fail(f"{wrong} of {N} elements wrong")

    def big_all_gather():
        n = N // W
        out = torch.empty(N - N % W, device=dev)
        dist.all_gather_into_tensor(out, gpu_vals(n, R, 2).float())
        want = torch.cat([gpu_vals(n, r, 2) for r in range(W)])
        wrong = int((out.long() != want).sum().item())
        if wrong:
            raise Fail(f"{wrong} of {out.numel()} elements wrong")

    def big_reduce_scatter():
        n = N // W
        out = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(out, gpu_vals(n * W, R, 3).float())
        want = sum(gpu_vals(n * W, r, 3) for r in range(W))[R * n:(R + 1) * n]
        wrong = int((out.long() != want).sum().item())
        if wrong:
            raise Fail(f"{wrong} of {n} elements wrong")

    S.check("big.all_reduce.float32.32MiB", big_all_reduce)
    S.check("big.broadcast.float32.32MiB", big_broadcast)
    S.check("big.reduce.float32.32MiB", big_reduce)
    S.check("big.all_gather_into_tensor.float32.32MiB", big_all_gather)
    S.check("big.reduce_scatter_tensor.float32.32MiB", big_reduce_scatter)

    # Random data against gloo computing the same op on CPU copies.
    def vs_gloo_all_reduce():
        g = torch.Generator().manual_seed(100 + R)
        x = torch.randn((1 << 20) + 7, generator=g)
        ref = x.clone()
        dist.all_reduce(ref, group=S.gloo)
        t = x.to(dev)
        dist.all_reduce(t)
        ok, diff = close(t.cpu(), ref, rtol=1e-5, atol=1e-5)
        if not ok:
            raise Fail(f"differs from gloo by up to {diff:g}")
        return f"max |nccl - gloo| {diff:.2g}"

    def vs_gloo_a2a():
        g = torch.Generator().manual_seed(200 + R)
        ins = [(R + 2 * j) % 3 * 1000 + j + 1 for j in range(W)]
        outs = [(j + 2 * R) % 3 * 1000 + R + 1 for j in range(W)]
        x = torch.randn(sum(ins), generator=g)
        ref = torch.empty(sum(outs))
        dist.all_to_all_single(ref, x, output_split_sizes=outs, input_split_sizes=ins, group=S.gloo)
        out = torch.empty(sum(outs), device=dev)
        dist.all_to_all_single(out, x.to(dev), output_split_sizes=outs, input_split_sizes=ins)
        if not torch.equal(out.cpu(), ref):
            raise Fail(f"differs from gloo in {int((out.cpu() != ref).sum())} of {ref.numel()} elements")

    S.check("vs_gloo.all_reduce.float32.random", vs_gloo_all_reduce)
    S.check("vs_gloo.all_to_all_single.uneven.float32.random", vs_gloo_a2a)


def section_p2p():
    dts = [F32, BF16, torch.int64, torch.uint8] if not args.quick else [F32]
    sizes = [1, 1027, (1 << 20) + 3]

    def pairs(dt):
        def run():
            if W < 2:
                raise Skip("needs 2 ranks")
            peer = R ^ 1
            if peer >= W:
                return "odd rank count: this rank has no partner"
            for n in sizes:
                mine = to_dev(move_vals(n, R, dt, salt=5), dt)
                got = empty(n, dt)
                if R % 2 == 0:
                    dist.send(mine, dst=peer)
                    dist.recv(got, src=peer)
                else:
                    dist.recv(got, src=peer)
                    dist.send(mine, dst=peer)
                compare(from_dev(got, dt), want_as(move_vals(n, peer, dt, salt=5), dt), f"n={n} from {peer}")
        return lambda: guard_dtype(run)

    def ring(dt):
        def run():
            nxt, prv = (R + 1) % W, (R - 1) % W
            for n in sizes:
                mine = to_dev(move_vals(n, R, dt, salt=6), dt)
                got = empty(n, dt)
                ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got, prv)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                compare(from_dev(got, dt), want_as(move_vals(n, prv, dt, salt=6), dt), f"n={n} from {prv}")
        return lambda: guard_dtype(run)

    def alltoall(dt):
        def run():
            for n in (5, 70001):
                sends = [to_dev(move_vals(n + j, R, dt, salt=j), dt) for j in range(W)]
                recvs = [empty(n + R, dt) for _ in range(W)]
                ops = []
                for j in range(W):
                    ops.append(dist.P2POp(dist.isend, sends[j], j))
                    ops.append(dist.P2POp(dist.irecv, recvs[j], j))
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                for j in range(W):
                    compare(from_dev(recvs[j], dt), want_as(move_vals(n + R, j, dt, salt=R), dt), f"n={n} from {j}")
        return lambda: guard_dtype(run)

    for dt in dts:
        S.check(f"send_recv.pairs.{dname(dt)}", pairs(dt))
        S.check(f"batch_isend_irecv.ring.{dname(dt)}", ring(dt))
        S.check(f"batch_isend_irecv.all_to_all.{dname(dt)}", alltoall(dt))


# bfloat16: torch hands NCCL a float scalar for bf16 (unpackPreMulSum<float,
# ncclBfloat16>) and NCCL reads the scalar in the op's datatype, i.e. the
# low 16 bits of the float. This factor's float has the same 16 bits in both
# halves (0x3F00 = bf16 0.5), so either reading gives 0.5 +- 0.2%.
BF16_FACTOR = struct.unpack("<f", struct.pack("<I", 0x3F003F00))[0]


def premul_op(factor):
    """_make_nccl_premul_sum(factor): a python float, or a device tensor
    (torch 2.11 binds at::Tensor; older releases a list of tensors)."""
    make = getattr(dist, "_make_nccl_premul_sum", None)
    if make is None:
        raise Skip("torch has no dist._make_nccl_premul_sum")
    if isinstance(factor, torch.Tensor):
        try:
            return make(factor)
        except TypeError:
            return make([factor])
    return make(float(factor))


def section_premul():
    tol = {F32: (1e-6, 1e-6), F64: (1e-12, 1e-12), F16: (2e-3, 2e-3), BF16: (1e-2, 1e-2)}
    dts = FLOATS if not args.quick else [F32, BF16]

    def candidates(dt, kind):
        """[(factor object for _make_nccl_premul_sum, the factor it means)]:
        the first that torch accepts is used."""
        f = BF16_FACTOR if dt is BF16 else 0.375
        if kind == "float":
            return [(f, f)]
        if dt is BF16:
            # torch 2.11 reads a bf16 op's tensor factor as const_data_ptr<float>();
            # a torch that reads it as bf16 refuses the float tensor: then a bf16 one.
            return [(torch.tensor([f], dtype=F32, device=dev), f), (torch.tensor([0.5], dtype=BF16, device=dev), 0.5)]
        return [(torch.tensor([f], dtype=dt, device=dev), f)]

    def run_op(dt, kind, coll):
        def once(n, factor):
            op = premul_op(factor)
            if coll == "all_reduce":
                xs = [red_vals(n, r, dt, salt=7) for r in range(W)]
                t = to_dev(xs[R], dt)
                dist.all_reduce(t, op=op)
                return t, torch.stack(xs).double().sum(0)
            xs = [red_vals(W * n, r, dt, salt=8) for r in range(W)]
            t = empty(n, dt)
            dist.reduce_scatter_tensor(t, to_dev(xs[R], dt), op=op)
            return t, torch.stack(xs).double().sum(0)[R * n:(R + 1) * n]

        def run():
            rtol, atol = tol[dt]
            cands = candidates(dt, kind)
            used = None
            for n in (1027, (1 << 20) + 3):
                for k, (factor, f) in enumerate(cands):
                    try:
                        t, s = once(n, factor)
                        used = (factor, f)
                        break
                    except (Fail, Skip):
                        raise
                    except Exception as e:  # noqa: BLE001
                        if k + 1 < len(cands) and torch_refuses(e, "expected scalar type", "scalar type", "found"):
                            continue
                        if torch_refuses(e, "premul", "data type"):
                            raise Skip(f"torch refuses: {str(e).splitlines()[0][:200]}")
                        raise
                cands = [used]  # the second size with the factor torch took
                torch.cuda.synchronize()
                compare(from_dev(t, dt), s * used[1], f"n={n} factor={used[1]:.6g}", rtol=rtol, atol=atol)
            if isinstance(used[0], torch.Tensor):
                return f"device factor {dname(used[0].dtype)}"
            return None
        return run

    for coll in ("all_reduce", "reduce_scatter"):
        for kind in ("float", "tensor"):
            for dt in dts:
                S.check(f"premul_sum.{coll}.{kind}_factor.{dname(dt)}", run_op(dt, kind, coll))

    def bf16_reading():
        # 0.25: the float's low 16 bits are 0, so a library reading the
        # scalar as NCCL documents (in the op's datatype) multiplies by 0.
        n = 4099
        xs = [red_vals(n, r, BF16, salt=9) for r in range(W)]
        t = to_dev(xs[R], BF16)
        try:
            dist.all_reduce(t, op=premul_op(0.25))
        except Exception as e:  # noqa: BLE001
            if torch_refuses(e, "premul", "data type"):
                raise Skip(f"torch refuses: {str(e).splitlines()[0][:200]}")
            raise
        got = from_dev(t, BF16)
        s = torch.stack(xs).double().sum(0)
        if torch.equal(got, s * 0.25):
            return "factor applied as 0.25 (torch passed a bf16 scalar, or the library read the float)"
        if torch.equal(got, s * 0.0):
            return "all zeros: the library read the low half of torch's float scalar as bf16, as NCCL does"
        raise Fail(f"neither 0.25*sum nor 0 (NCCL's reading of torch's float scalar): first values {got[:6].tolist()}")
    if BF16 in dts:
        S.check("premul_sum.all_reduce.bfloat16.scalar_reading", bf16_reading)

    def after():
        # A failed PreMulSum must fail that call only.
        t = to_dev(red_vals(1 << 16, R, F32, salt=10), F32)
        dist.all_reduce(t)
        compare(from_dev(t, F32), torch.stack([red_vals(1 << 16, r, F32, salt=10) for r in range(W)]).sum(0).double(), "sum")
    S.check("premul_sum.then_plain_all_reduce", after)


def section_realloc():
    rounds = 8 if args.quick else 14

    def rounds_of(coll, sizes, free_cache, pause):
        def run():
            prev, same = None, 0
            for k in range(rounds):
                n = sizes[k % len(sizes)]
                if coll == "all_gather":
                    t = torch.empty(n * W, device=dev)  # the output is the buffer under test
                else:
                    t = torch.empty(n, device=dev)
                ptr = t.data_ptr()
                same += int(ptr == prev)
                i = torch.arange(t.numel(), device=dev, dtype=torch.int64)
                salt = 13 * k + 1
                if coll == "all_reduce":
                    t.copy_((i * 7 + R * 3 + salt) % 11 - 5)
                    dist.all_reduce(t)
                    want = sum((i * 7 + r * 3 + salt) % 11 - 5 for r in range(W))
                elif coll == "broadcast":
                    t.copy_((i * 5 + R * 3 + salt) % 13)
                    dist.broadcast(t, src=k % W)
                    want = (i * 5 + (k % W) * 3 + salt) % 13
                else:
                    t.fill_(-1.0)
                    j = torch.arange(n, device=dev, dtype=torch.int64)
                    dist.all_gather_into_tensor(t, ((j * 5 + R * 3 + salt) % 13).float())
                    want = torch.cat([(j * 5 + r * 3 + salt) % 13 for r in range(W)])
                wrong = int((t.long() != want).sum().item())
                if wrong:
                    raise Fail(f"round {k}: {wrong} of {t.numel()} elements wrong "
                               f"(buffer at 0x{ptr:x}, {'the same address as' if ptr == prev else 'not at'} the previous round's)")
                prev = ptr
                del t, i, want
                if free_cache:
                    torch.cuda.synchronize()
                    if pause:
                        time.sleep(pause)  # let torch's watchdog drop its references to the work's tensors
                    torch.cuda.empty_cache()
            return f"{same} of {rounds - 1} rounds reused the previous address"
        return run

    big, other = 1 << 22, 3 << 20
    S.check("realloc.all_reduce.same_size.empty_cache", rounds_of("all_reduce", [big], True, 0.15), limit=150)
    S.check("realloc.all_reduce.other_sizes.empty_cache", rounds_of("all_reduce", [big, other, big * 2, (1 << 20) + 5], True, 0.15), limit=150)
    S.check("realloc.all_reduce.no_empty_cache", rounds_of("all_reduce", [big, other], False, 0), limit=150)
    S.check("realloc.all_gather.output.empty_cache", rounds_of("all_gather", [1 << 20, (1 << 20) + 3], True, 0.15), limit=150)
    S.check("realloc.broadcast.empty_cache", rounds_of("broadcast", [big, other], True, 0.15), limit=150)

    def many_small():
        # Many short-lived tensors through the caching allocator.
        for k in range(200):
            n = 1 + (k * 37) % 5000
            t = torch.full((n,), float(R + k % 3), device=dev)
            dist.all_reduce(t)
            want = sum(r + k % 3 for r in range(W))
            if not bool((t == want).all().item()):
                raise Fail(f"tensor {k} (n={n}): got {t[:3].tolist()}, want {want}")
            if k % 50 == 49:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    S.check("realloc.many_small_tensors", many_small, limit=120)


def world_sum_check(tag):
    t = to_dev(red_vals(4097, R, F32, salt=11), F32)
    dist.all_reduce(t)
    compare(from_dev(t, F32), torch.stack([red_vals(4097, r, F32, salt=11) for r in range(W)]).sum(0).double(), tag)


def group_check(g, members, tag):
    """all_reduce and all_gather on g among members (global ranks)."""
    gr = members.index(R)
    n = 2051
    xs = [red_vals(n, r, F32, salt=12) for r in members]
    t = to_dev(xs[gr], F32)
    dist.all_reduce(t, group=g)
    compare(from_dev(t, F32), torch.stack(xs).sum(0).double(), f"{tag} all_reduce")
    out = empty(n * len(members), F32)
    dist.all_gather_into_tensor(out, to_dev(move_vals(n, R, F32), F32), group=g)
    want = torch.cat([move_vals(n, r, F32) for r in members])
    compare(from_dev(out, F32), want.double(), f"{tag} all_gather")
    b = to_dev(move_vals(n, R, F32, salt=2), F32)
    dist.broadcast(b, src=members[-1], group=g)
    compare(from_dev(b, F32), move_vals(n, members[-1], F32, salt=2).double(), f"{tag} broadcast")


def section_groups():
    everyone = list(range(W))
    left_out = everyone[:-1] if W > 1 else everyone  # the last rank left out
    odd = [r for r in everyone if r % 2 == 1] or everyone

    def new_group_with(members, tag):
        def run():
            g = dist.new_group(members)
            if R in members:
                if g == dist.GroupMember.NON_GROUP_MEMBER:
                    raise Fail("a member got NON_GROUP_MEMBER")
                group_check(g, members, tag)
            elif g != dist.GroupMember.NON_GROUP_MEMBER:
                raise Fail(f"rank {R} is not in {members} but got a group")
            world_sum_check("world after")
        return run

    S.check("new_group.all_ranks", new_group_with(everyone, "new_group(all)"))
    S.check(f"new_group.ranks_left_out.{'_'.join(map(str, left_out))}", new_group_with(left_out, "new_group(left out)"))
    S.check(f"new_group.noncontiguous.{'_'.join(map(str, odd))}", new_group_with(odd, "new_group(odd)"))

    split = getattr(dist, "split_group", None)

    def split_with(split_ranks, tag):
        def run():
            if split is None:
                raise Skip("torch has no dist.split_group")
            try:
                g = split(split_ranks=split_ranks)
            except Exception as e:  # noqa: BLE001
                if args.lazy and torch_refuses(e, "device", "bound", "not safe", "split"):
                    raise Skip(f"split_group needs eager init (device_id): {str(e).splitlines()[0][:160]}")
                raise
            mine = next((m for m in split_ranks if R in m), None)
            if mine is None:
                if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER:
                    raise Fail(f"rank {R} is in no split but got a group")
            else:
                if g is None:
                    raise Fail(f"rank {R} is in split {mine} but got None")
                group_check(g, mine, tag)
            world_sum_check("world after")
        return run

    S.check(f"split_group.ranks_left_out.{'_'.join(map(str, left_out))}", split_with([left_out], "split_group(NOCOLOR)"))
    halves = [[r for r in everyone if r % 2 == 0], [r for r in everyone if r % 2 == 1]]
    halves = [h for h in halves if h]
    S.check("split_group.even_odd", split_with(halves, "split_group(even/odd)"))

    def nested():
        if split is None:
            raise Skip("torch has no dist.split_group")
        if args.lazy:
            raise Skip("split_group needs eager init (device_id)")
        parent = split(split_ranks=[everyone])
        # split the split: the first rank left out, in the parent's numbering
        sub_members = everyone[1:] if W > 1 else everyone
        child = split(parent_pg=parent, split_ranks=[[r for r in sub_members]])
        if R in sub_members:
            if child is None:
                raise Fail("a member got None")
            group_check(child, sub_members, "split of a split")
        group_check(parent, everyone, "parent after its split")
        world_sum_check("world after")
    S.check("split_group.of_a_split", nested)

    def interleaved():
        # Collectives alternating between the world and two subgroups.
        a = dist.new_group(everyone)
        b = dist.new_group(left_out)
        for k in range(10):
            world_sum_check(f"world, round {k}")
            group_check(a, everyone, f"a, round {k}")
            if R in left_out:
                group_check(b, left_out, f"b, round {k}")
    S.check("groups.interleaved_with_world", interleaved, limit=120)


def section_threads():
    g1 = dist.new_group(list(range(W)))
    g2 = dist.new_group(list(range(W)))

    def run():
        errors = []
        base = W * (W + 1) / 2
        # Both groups' communicators exist before the threads start (lazy
        # init makes them at the first collective): this checks use, not init.
        group_check(g1, list(range(W)), "g1 before the threads")
        group_check(g2, list(range(W)), "g2 before the threads")

        def worker(k, g):
            try:
                torch.cuda.set_device(0)
                s = torch.cuda.Stream()
                with torch.cuda.stream(s):
                    for i in range(40):
                        n = 4096 + 97 * i
                        t = torch.full((n,), float(R + 1 + 100 * k + i), device=dev)
                        dist.all_reduce(t, group=g)
                        want = base + W * (100 * k + i)
                        if not bool((t == want).all().item()):
                            errors.append(f"thread {k} op {i}: got {t[:2].tolist()}, want {want}")
                            return
                s.synchronize()
            except Exception as e:  # noqa: BLE001
                errors.append(f"thread {k}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

        ts = [threading.Thread(target=worker, args=(k, g)) for k, g in ((1, g1), (2, g2))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=90)
        if any(t.is_alive() for t in ts):
            raise Fail("a thread did not finish in 90 s")
        if errors:
            raise Fail("; ".join(errors[:2]))
        world_sum_check("world after")
    S.check("threads.two_groups_at_once", run, limit=150)


def section_unsigned():
    # Last: see section_basic.
    if not UNS:
        return
    section_basic(UNS, [])


def section_estimator():
    te = getattr(dist, "_time_estimator", None) or getattr(dist.distributed_c10d, "_time_estimator", None)

    def estimate():
        if te is None:
            raise Skip("torch has no _time_estimator")
        t = torch.full((1 << 20,), float(R + 1), device=dev)
        before = t.clone()
        try:
            with te(group=dist.group.WORLD, device=dev) as cm:
                dist.all_reduce(t)
        except NotImplementedError as e:
            raise Skip(f"torch: {e}")
        est = cm.estimated_time
        torch.cuda.synchronize()
        if not isinstance(est, (int, float)) or est != est or est < 0:
            raise Fail(f"estimated_time {est!r}")
        if W > 1 and not torch.equal(t, before):
            raise Fail("the collective inside _time_estimator ran (its buffer changed): a simulation must not run it")
        return f"estimated {est:g}"
    S.check("time_estimator.all_reduce", estimate)

    def after():
        # The estimator's group must be closed: this must run, and right.
        t = torch.full((1 << 20,), float(R + 1), device=dev)
        dist.all_reduce(t)
        want = W * (W + 1) / 2
        bad = int((t != want).sum().item())
        if bad:
            raise Fail(f"{bad} of {t.numel()} elements wrong after the estimator (first {t[0].item()}, want {want})")
        world_sum_check("second collective")
        g = dist.new_group(list(range(W)))
        group_check(g, list(range(W)), "a new group after the estimator")
    S.check("time_estimator.then_collectives", after)


def section_abort():
    abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
    everyone = list(range(W))
    subset = everyone[:-1] if W > 1 else everyone
    # torch's note: abort with TORCH_NCCL_ASYNC_ERROR_HANDLING off; the
    # variable is read when each process group is made.
    saved = os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING")
    os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
    sibling = dist.new_group(everyone)
    victim = dist.new_group(everyone)
    victim2 = dist.new_group(subset)
    if saved is None:
        os.environ.pop("TORCH_NCCL_ASYNC_ERROR_HANDLING", None)
    else:
        os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = saved

    def do_abort(g):
        if abort is not None:
            abort(g)
        else:
            g.abort()

    def setup():
        group_check(sibling, everyone, "sibling")
        group_check(victim, everyone, "victim")
        if R in subset:
            group_check(victim2, subset, "victim2")
        return "" if abort is not None else "no _abort_process_group: ProcessGroup.abort() used"
    S.check("abort.setup", setup)
    S.check("abort.subgroup_of_all_ranks", lambda: do_abort(victim))
    S.check("abort.world_after", lambda: world_sum_check("world after abort"))
    S.check("abort.sibling_after", lambda: group_check(sibling, everyone, "sibling after abort"))

    def abort_subset():
        if R in subset:
            do_abort(victim2)
        world_sum_check("world after abort of a subset group")
        group_check(sibling, everyone, "sibling after second abort")
    S.check(f"abort.subgroup_with_ranks_left_out.{'_'.join(map(str, subset))}", abort_subset)

    def new_after():
        g = dist.new_group(everyone)
        group_check(g, everyone, "a group made after the aborts")
    S.check("abort.new_group_after", new_after)


S.run_sections(warmup, args.sections, globals())
