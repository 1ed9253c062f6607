"""torch_ddp: PyTorch DistributedDataParallel on flexlink's libnccl.so.2.

Run as 2 ranks, e.g. (scripts/nccl-device.sh does this):

    flexrun -np 2 -x LD_PRELOAD=build/nccl/lib/libnccl.so.2 python3 examples/torch_ddp.py

flexrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for torch's
env:// rendezvous. Both ranks use GPU TORCH_DDP_DEVICE (default: LOCAL_RANK
modulo the visible GPUs), so two processes may share one GPU, which the real
NCCL refuses. Checks: a few DDP steps leave identical weights on every rank,
equal to one process training on the whole batch; all_to_all_single,
all_gather_into_tensor, reduce_scatter_tensor, broadcast and new_group give
the reference results. Prints "torch_ddp: ok" on rank 0.
"""
import os

import torch
import torch.distributed as dist


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = int(os.environ.get("TORCH_DDP_DEVICE", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count()))
    torch.cuda.set_device(dev)
    device = torch.device("cuda", dev)
    dist.init_process_group("nccl", device_id=device)

    # Collectives against references.
    x = torch.arange(world * 4, dtype=torch.float32, device=device) + 100 * rank
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    want = torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32, device=device) + 100 * r for r in range(world)])
    assert torch.equal(out, want), ("all_to_all_single", out, want)

    g = torch.empty(world * 3, device=device)
    dist.all_gather_into_tensor(g, torch.full((3,), float(rank), device=device))
    assert torch.equal(g, torch.arange(world, device=device, dtype=torch.float32).repeat_interleave(3)), ("all_gather_into_tensor", g)

    rs = torch.empty(2, device=device)
    dist.reduce_scatter_tensor(rs, torch.arange(world * 2, dtype=torch.float32, device=device) * (rank + 1))
    scale = sum(r + 1 for r in range(world))
    assert torch.equal(rs, torch.arange(rank * 2, rank * 2 + 2, dtype=torch.float32, device=device) * scale), ("reduce_scatter_tensor", rs)

    b = torch.full((5,), float(rank), device=device)
    dist.broadcast(b, src=world - 1)
    assert torch.equal(b, torch.full((5,), float(world - 1), device=device)), ("broadcast", b)

    sub = dist.new_group(list(range(world)))
    s = torch.ones(1, device=device)
    dist.all_reduce(s, group=sub)
    assert s.item() == world, ("new_group all_reduce", s)

    # DDP: every rank trains on its slice of one batch; a single model
    # trained on the whole batch with the mean loss is the reference.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    ref.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.05)
    gen = torch.Generator(device="cpu").manual_seed(1)
    per = 8
    for _ in range(5):
        xb = torch.randn(per * world, 16, generator=gen).to(device)
        yb = torch.randn(per * world, 4, generator=gen).to(device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(xb[rank * per:(rank + 1) * per]), yb[rank * per:(rank + 1) * per]).backward()
        opt.step()
        ropt.zero_grad()
        torch.nn.functional.mse_loss(ref(xb), yb).backward()
        ropt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    for r, w in enumerate(everyone):
        assert torch.equal(w, flat), ("weights differ between ranks", r)
    want = torch.cat([p.detach().flatten() for p in ref.parameters()])
    assert torch.allclose(flat, want, rtol=1e-4, atol=1e-5), ("DDP differs from single-process training", (flat - want).abs().max())

    torch.cuda.synchronize()
    dist.destroy_process_group()
    if rank == 0:
        print("torch_ddp: ok")


if __name__ == "__main__":
    main()
