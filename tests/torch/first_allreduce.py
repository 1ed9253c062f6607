"""first_allreduce: how long a process takes from its start to its first
finished all_reduce (issue 28's cold-start figure), and optionally a short
DDP run after it.

    flexrun -np N --oversubscribe --nccl python3 tests/torch/first_allreduce.py [--backend nccl|gloo] [--ddp STEPS]

Rank 0 prints one line:

    FIRST backend=B ranks=N import=Is init=Is first=Is total=Ts [ddp=Ds]

import: process start (from /proc) to `import torch` done; init: to
init_process_group done; first: to the first all_reduce done
(synchronised); work: to the end of the DDP steps; total: to after
destroy_process_group. Every rank uses cuda:0 (ranks share the one GPU);
the gloo backend gets the same CUDA tensors (it stages them through host
memory), so a DDP comparison differs only in the collectives.
"""
import argparse
import os
import time


def process_start():
    """The process's start time (seconds since the epoch), from /proc."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return btime + ticks / os.sysconf("SC_CLK_TCK")


T0 = process_start()
p = argparse.ArgumentParser()
p.add_argument("--backend", default="nccl")
p.add_argument("--ddp", type=int, default=0, help="DDP steps after the first all_reduce")
args = p.parse_args()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

t_import = time.time()
rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29561")
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group(args.backend, rank=rank, world_size=world, device_id=dev if args.backend == "nccl" else None)
t_init = time.time()
x = torch.full((1024,), float(rank + 1), device=dev)
dist.all_reduce(x)
torch.cuda.synchronize()
t_first = time.time()
want = world * (world + 1) / 2
if x[0].item() != want:
    raise SystemExit(f"rank {rank}: all_reduce gave {x[0].item()}, want {want}")
ddp = ""
if args.ddp:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).to(dev)
    t = time.time()
    m = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    setup = time.time() - t
    t = time.time()
    for _ in range(args.ddp):
        opt.zero_grad()
        m(torch.randn(64, 256, device=dev)).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    ddp = f" ddp_setup={setup:.3f}s ddp={time.time() - t:.3f}s"
t_end = time.time()
dist.barrier()
dist.destroy_process_group()
if rank == 0:
    print(f"FIRST backend={args.backend} ranks={world} import={t_import - T0:.3f}s init={t_init - T0:.3f}s "
          f"first={t_first - T0:.3f}s work={t_end - T0:.3f}s total={time.time() - T0:.3f}s{ddp}", flush=True)
