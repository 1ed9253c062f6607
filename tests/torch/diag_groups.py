"""Which torch calls leave an NCCL group open on the calling thread?

One case per process (python3 diag_groups.py CASE): the case runs (an
exception from torch is printed, not fatal), then a probe that any library
must run at once: an out-of-place all_gather_into_tensor into a buffer of
-1s, checked on the host. "probe ok" means the thread is not inside a
group; "probe NOT RUN" means every call is being deferred to a group end
that will never come. Run with the real NCCL (1 rank) and flexlink's
library (flexrun --nccl, 2 ranks), with FLEXLINK_DEBUG=TRACE to see the
group starts and ends.
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

case = sys.argv[1]
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev, timeout=timedelta(seconds=60))
R, W = dist.get_rank(), dist.get_world_size()


def probe():
    inp = torch.full((1024,), float(R + 1), device=dev)
    out = torch.full((1024 * W,), -1.0, device=dev)
    dist.all_gather_into_tensor(out, inp)
    torch.cuda.synchronize()
    want = torch.arange(1, W + 1, device=dev, dtype=torch.float32).repeat_interleave(1024)
    return "ok" if torch.equal(out, want) else f"NOT RUN (first {out[0].item()})"


def run():
    u32 = torch.uint32
    if case == "control":
        return
    if case == "estimator":
        te = dist.distributed_c10d._time_estimator
        t = torch.ones(1 << 20, device=dev)
        with te(group=dist.group.WORLD, device=dev) as cm:
            dist.all_reduce(t)
        print(f"rank {R}: estimated_time {cm.estimated_time}", flush=True)
    elif case == "a2a_equal_u32":
        x = torch.zeros(4 * W, device=dev, dtype=torch.int32).view(u32)
        dist.all_to_all_single(torch.empty_like(x), x)
    elif case == "a2a_uneven_u32":
        x = torch.zeros(W, device=dev, dtype=torch.int32).view(u32)
        dist.all_to_all_single(torch.empty_like(x), x, [1] * W, [1] * W)
    elif case == "gather_u32":
        x = torch.zeros(4, device=dev, dtype=torch.int32).view(u32)
        dist.gather(x, [torch.empty_like(x) for _ in range(W)] if R == 0 else None, dst=0)
    elif case == "scatter_u32":
        x = torch.zeros(4, device=dev, dtype=torch.int32).view(u32)
        dist.scatter(x, [torch.empty_like(x) for _ in range(W)] if R == 0 else None, src=0)
    elif case == "reduce_scatter_u32":
        x = torch.zeros(4 * W, device=dev, dtype=torch.int32).view(u32)
        dist.reduce_scatter_tensor(torch.empty(4, device=dev, dtype=torch.int32).view(u32), x)
    else:
        raise SystemExit(f"unknown case {case}")


try:
    run()
    print(f"rank {R}: {case}: ran", flush=True)
except Exception as e:  # noqa: BLE001
    print(f"rank {R}: {case}: raised {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
print(f"rank {R}: {case}: probe {probe()}", flush=True)
os._exit(0)  # no teardown: a thread left inside a group may hang it
