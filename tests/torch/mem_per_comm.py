"""GPU memory per extra communicator (issue 27's goal: at most 16 MiB).

Every rank shares GPU 0, so cudaMemGetInfo sees all ranks' memory: the
drop in free memory across K new groups, each used once by a small
all_reduce (flexlink allocates its regions on first use), divided by
K x world size, is the cost of one communicator on one rank. Run under
flexrun --nccl (flexlink) and as one process with torch's NCCL.
"""
import os
from datetime import timedelta

import torch
import torch.distributed as dist

K = int(os.environ.get("COMMS", "4"))
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev, timeout=timedelta(seconds=120))
R, W = dist.get_rank(), dist.get_world_size()
t = torch.ones(1024, device=dev)
gloo = dist.new_group(backend="gloo")
dist.all_reduce(t)  # the world communicator: set up and used
torch.cuda.synchronize()


def free():
    dist.barrier(group=gloo)
    torch.cuda.synchronize()
    f, _ = torch.cuda.mem_get_info()
    dist.barrier(group=gloo)
    return f


f0 = free()
groups = [dist.new_group(list(range(W))) for _ in range(K)]
for g in groups:
    dist.all_reduce(t, group=g)
torch.cuda.synchronize()
f1 = free()
if R == 0:
    per = (f0 - f1) / (K * W) / 2**20
    print(f"mem_per_comm: world {W}, {K} extra communicators: {(f0 - f1) / 2**20:.1f} MiB in all, {per:.1f} MiB per communicator per rank", flush=True)
dist.destroy_process_group()
