"""test_training: short training runs on the NCCL backend, each checked
step by step (every rank's loss and every parameter after every step)
against one process training the same model on the same data.

    flexrun -np N --oversubscribe --nccl python3 tests/torch/test_training.py [--only S,...] [--label L]

Sections:
  ddp    DistributedDataParallel (several gradient buckets), SGD
  fsdp   FSDP2 fully_shard: float32; bf16 mixed precision
         (MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32));
         bf16 mixed precision with set_gradient_divide_factor(2 * world), so
         the reduce-scatter runs as PreMulSum(1 / factor)
  tp     tensor parallel: parallelize_module with ColwiseParallel and
         RowwiseParallel on a 2-layer MLP over a 1-D DeviceMesh
  pp     pipeline parallel (torch.distributed.pipelining): 2 stages,
         ScheduleGPipe, 4 microbatches; with 4 ranks two pipelines, on the
         2-rank subgroups {0,1} and {2,3}; 1 rank: SKIP

The reference of a data-parallel step runs every rank's slice of the batch
through the reference model in turn (bf16 copies of the float32 master
weights under mixed precision, as FSDP2 does), sums the gradients and
divides as the distributed run does. Tolerances: float32 runs 1e-4
relative, mixed precision 1e-2 on the loss and 1e-3 on the float32 master
weights.
"""
import copy
import inspect
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Fail, Skip, Suite, close, parse_args  # noqa: E402

SECTIONS = ["ddp", "fsdp", "tp", "pp"]
args = parse_args(sections=SECTIONS)
S = Suite("test_training", lazy=args.lazy, label=args.label)
R, W, dev = S.rank, S.world, S.device
STEPS, LR = 5, 0.05
_mesh = []


def mesh():
    if not _mesh:
        from torch.distributed.device_mesh import init_device_mesh
        _mesh.append(init_device_mesh("cuda", (W,)))
    return _mesh[0]


def batch(step, n, din, dout):
    """The step's whole batch, the same on every rank."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(n, din, generator=g).to(dev), torch.randn(n, dout, generator=g).to(dev)


def mlp(seed, dims):
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).to(dev)


def full(p):
    """A parameter's whole value (DTensor parameters are gathered)."""
    p = p.detach()
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def check_loss(step, got, want, rtol, atol):
    if not abs(got - want) <= atol + rtol * abs(want):
        raise Fail(f"step {step}: loss {got:.8g}, reference {want:.8g}")


def check_params(step, named, ref_params, rtol, atol):
    worst = 0.0
    for (name, p), q in zip(named, ref_params):
        ok, diff = close(full(p), q, rtol, atol)
        worst = max(worst, diff)
        if not ok:
            raise Fail(f"step {step}: parameter {name} differs from the reference by up to {diff:.3g}")
    return worst


def warmup():
    t = torch.full((1 << 16,), float(R + 1), device=dev)
    dist.all_reduce(t)
    want = W * (W + 1) / 2
    if not bool((t == want).all().item()):
        raise Fail(f"first all_reduce: got {t[:4].tolist()}..., want {want}")


# ---- DDP -------------------------------------------------------------------

def section_ddp():
    def run():
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = mlp(0, [32, 128, 128, 8])
        ref = copy.deepcopy(model)
        ddp = DDP(model, device_ids=[0], bucket_cap_mb=0.05)  # ~87 KB of gradients: several buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        ropt = torch.optim.SGD(ref.parameters(), lr=LR)
        per = 8
        worst = 0.0
        for step in range(STEPS):
            x, y = batch(step, per * W, 32, 8)
            opt.zero_grad()
            loss = F.mse_loss(ddp(x[R * per:(R + 1) * per]), y[R * per:(R + 1) * per])
            loss.backward()
            opt.step()
            ropt.zero_grad()
            losses = [F.mse_loss(ref(x[r * per:(r + 1) * per]), y[r * per:(r + 1) * per]) for r in range(W)]
            (sum(losses) / W).backward()
            ropt.step()
            check_loss(step, loss.item(), losses[R].item(), 1e-5, 1e-6)
            worst = max(worst, check_params(step, model.named_parameters(), ref.parameters(), 1e-4, 1e-5))
        return f"{STEPS} steps, max |param - ref| {worst:.2g}"
    S.check("ddp.sgd.float32", run, limit=150)


# ---- FSDP2 -----------------------------------------------------------------

def fsdp_api():
    try:
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy, FSDPModule


def section_fsdp():
    def variant(mp, factor):
        def run():
            fully_shard, MixedPrecisionPolicy, FSDPModule = fsdp_api()
            model = mlp(11, [16, 64, 64, 8])
            ref = copy.deepcopy(model)
            kw = {"mesh": mesh()}
            if mp:
                kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for m in model:
                if isinstance(m, nn.Linear):
                    fully_shard(m, **kw)
            fully_shard(model, **kw)
            if factor is not None:
                set_any = False
                for m in model.modules():
                    if isinstance(m, FSDPModule):
                        setter = getattr(m, "set_gradient_divide_factor", None) or getattr(m, "set_reduce_scatter_divide_factor")
                        setter(factor)
                        set_any = True
                if not set_any:
                    raise Fail("no FSDP module to set the divide factor on")
            opt = torch.optim.SGD(model.parameters(), lr=LR)
            ropt = torch.optim.SGD(ref.parameters(), lr=LR)
            scale = 1.0 / (factor if factor is not None else W)
            per = 4
            lt, pt = ((1e-2, 1e-3), (1e-3, 2e-4)) if mp else ((1e-5, 1e-6), (1e-4, 1e-5))
            worst = 0.0
            for step in range(STEPS):
                x, y = batch(step, per * W, 16, 8)
                out = model(x[R * per:(R + 1) * per])
                loss = ((out.float() - y[R * per:(R + 1) * per]) ** 2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad()

                ropt.zero_grad()
                ref_losses = []
                if mp:
                    acc = [torch.zeros_like(p) for p in ref.parameters()]
                    for r in range(W):
                        m16 = copy.deepcopy(ref).to(torch.bfloat16)
                        o = m16(x[r * per:(r + 1) * per].to(torch.bfloat16))
                        lr_ = ((o.float() - y[r * per:(r + 1) * per]) ** 2).mean()
                        lr_.backward()
                        for a, q in zip(acc, m16.parameters()):
                            a += q.grad.float()
                        ref_losses.append(lr_.item())
                    for p, a in zip(ref.parameters(), acc):
                        p.grad = a * scale
                else:
                    total = 0.0
                    for r in range(W):
                        lr_ = ((ref(x[r * per:(r + 1) * per]) - y[r * per:(r + 1) * per]) ** 2).mean()
                        ref_losses.append(lr_.item())
                        total = total + lr_
                    (total * scale).backward()
                ropt.step()
                check_loss(step, loss.item(), ref_losses[R], *lt)
                worst = max(worst, check_params(step, model.named_parameters(), ref.parameters(), *pt))
            return f"{STEPS} steps, max |param - ref| {worst:.2g}"
        return run

    S.check("fsdp2.float32", variant(False, None), limit=150)
    S.check("fsdp2.bf16_mixed_precision", variant(True, None), limit=150)
    S.check(f"fsdp2.bf16_mixed_precision.divide_factor_{2 * W}.premul_sum", variant(True, 2.0 * W), limit=150)


# ---- tensor parallel ---------------------------------------------------------

class TPMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(16, 64)
        self.w2 = nn.Linear(64, 16)

    def forward(self, x):
        return self.w2(torch.relu(self.w1(x)))


def section_tp():
    def run():
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        torch.manual_seed(12)
        model = TPMLP().to(dev)
        ref = copy.deepcopy(model)
        parallelize_module(model, mesh(), {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        ropt = torch.optim.SGD(ref.parameters(), lr=LR)
        worst = 0.0
        for step in range(STEPS):
            x, y = batch(step, 8, 16, 16)
            out = model(x)
            if hasattr(out, "full_tensor"):
                out = out.full_tensor()
            loss = F.mse_loss(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rl = F.mse_loss(ref(x), y)
            rl.backward()
            ropt.step()
            ropt.zero_grad()
            check_loss(step, loss.item(), rl.item(), 1e-4, 1e-6)
            worst = max(worst, check_params(step, model.named_parameters(), ref.parameters(), 1e-4, 1e-5))
        return f"{STEPS} steps, max |param - ref| {worst:.2g}"
    S.check("tensor_parallel.colwise_rowwise_mlp", run, limit=150)


# ---- pipeline parallel -------------------------------------------------------

def section_pp():
    # Two-rank groups {0,1}, {2,3}, ... made by every rank, in one order.
    groups = {}
    if W > 2:
        for lo in range(0, W - 1, 2):
            groups[lo] = dist.new_group([lo, lo + 1])

    def run():
        if W < 2:
            raise Skip("needs 2 ranks (2 stages)")
        lo = R - R % 2
        if lo + 1 >= W:
            return None  # an odd last rank has no partner
        group = groups.get(lo) if W > 2 else dist.group.WORLD
        stage_idx = R - lo
        from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
        model = mlp(13, [16, 32, 32, 8])  # Linear ReLU Linear ReLU Linear
        ref = copy.deepcopy(model)
        parts = [[0, 1], [2, 3, 4]]
        sub = nn.Sequential(*[model[i] for i in parts[stage_idx]])
        ref_mine = [p for i in parts[stage_idx] for p in ref[i].parameters()]
        stage = PipelineStage(sub, stage_index=stage_idx, num_stages=2, device=dev, group=group)
        n_mb = 4
        kw = {}
        scale_grads = "scale_grads" in inspect.signature(ScheduleGPipe.__init__).parameters
        if scale_grads:
            kw["scale_grads"] = True  # gradients of the mean over microbatches

        def loss_fn(out, target):
            return F.mse_loss(out, target)
        sched = ScheduleGPipe(stage, n_microbatches=n_mb, loss_fn=loss_fn, **kw)
        opt = torch.optim.SGD(sub.parameters(), lr=LR)
        ropt = torch.optim.SGD(ref.parameters(), lr=LR)
        worst = 0.0
        for step in range(STEPS):
            x, y = batch(step, 16, 16, 8)
            opt.zero_grad()
            losses = []
            if stage_idx == 0:
                sched.step(x)
            else:
                sched.step(target=y, losses=losses)
            opt.step()
            ropt.zero_grad()
            mb = 16 // n_mb
            rl = [F.mse_loss(ref(x[k * mb:(k + 1) * mb]), y[k * mb:(k + 1) * mb]) for k in range(n_mb)]
            (sum(rl) / (n_mb if scale_grads else 1)).backward()
            ropt.step()
            if stage_idx == 1:
                if len(losses) != n_mb:
                    raise Fail(f"step {step}: {len(losses)} microbatch losses, want {n_mb}")
                for k in range(n_mb):
                    check_loss(step, float(losses[k]), rl[k].item(), 1e-5, 1e-6)
            named = [(f"stage{stage_idx}.{n}", p) for n, p in sub.named_parameters()]
            worst = max(worst, check_params(step, named, ref_mine, 1e-4, 1e-5))
        return f"{STEPS} steps x {n_mb} microbatches, max |param - ref| {worst:.2g}"
    S.check("pipeline_parallel.gpipe_2_stages", run, limit=150)


S.run_sections(warmup, args.sections, globals())
