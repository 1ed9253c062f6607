"""compile_tp: torch.compile(mode="reduce-overhead") of a tensor-parallel MLP
with functional collectives (issue 29).

Each rank holds a column shard of W1 and a row shard of W2 (Megatron's
split); the layer is y = all_reduce(relu(x @ W1_r) @ W2_r), then an
all_gather_tensor of a row shard of y and a reduce_scatter_tensor of it back
(sequence-parallel's pair), so three functional collectives run inside the
compiled graph. mode="reduce-overhead" runs the compiled graph as a CUDA
graph (inductor's cudagraph trees): the collectives are captured and
replayed.

Checks, STEPS steps with new inputs each:
  * the compiled step equals the eager step (same shards, same collectives)
    within float32 rounding;
  * the eager step equals a float64 reference of the whole (unsharded) MLP
    computed on the host, within float32 rounding;
  * inductor reports whether it skipped CUDA graphs (printed; a skip is a
    FAIL: the point is the captured collectives).

Run as one process on torch's NCCL or under LD_PRELOAD of flexlink's
libnccl, or under flexrun --nccl for more ranks (GPU LOCAL_RANK mod the GPUs seen; ranks share cuda:0 on one GPU).
Prints "PASS name" / "FAIL name: detail" and "COMPILE-END passed=P
failed=F"; exit 1 on a failure.
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

STEPS = int(os.environ.get("STEPS", "50"))
D, H, B = 256, 512, 64  # model width, hidden width, batch rows

if "RANK" not in os.environ:
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29573"))
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev, timeout=timedelta(seconds=120))
R, W = dist.get_rank(), dist.get_world_size()
group = dist.group.WORLD
passed = failed = 0


def report(ok, name, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    if R == 0 or not ok:
        print(("PASS " if ok else "FAIL ") + name + (": " + detail if detail else ""), flush=True)


# Every rank makes the same full weights from one seed and keeps its shards.
g = torch.Generator().manual_seed(1234)
W1 = torch.randn(D, H, generator=g, dtype=torch.float64) / D**0.5
W2 = torch.randn(H, D, generator=g, dtype=torch.float64) / H**0.5
assert H % W == 0 and B % W == 0, "world size must divide H and B"
hs = H // W
w1 = W1[:, R * hs:(R + 1) * hs].to(dev, torch.float32).contiguous()
w2 = W2[R * hs:(R + 1) * hs, :].to(dev, torch.float32).contiguous()


def step(x):
    h = torch.relu(x @ w1)
    y = funcol.all_reduce(h @ w2, "sum", group)  # the row-parallel layer's sum
    rows = B // W
    shard = y[R * rows:(R + 1) * rows] * 2.0
    full = funcol.all_gather_tensor(shard, 0, group)  # every rank's rows, in rank order
    back = funcol.reduce_scatter_tensor(full, "sum", 0, group)  # W copies of full summed, my rows
    return y, full, back


def reference(x64):
    y = torch.relu(x64 @ W1) @ W2
    return y, 2.0 * y, 2.0 * W * y[R * (B // W):(R + 1) * (B // W)]


def close(a, b, tol=2e-4):
    a, b = a.double().cpu(), b.double().cpu()
    err = (a - b).abs().max().item()
    scale = max(1.0, b.abs().max().item())
    return err <= tol * scale, err


def main():
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    gx = torch.Generator().manual_seed(99)
    t0 = time.monotonic()
    worst_c, worst_r, bad = 0.0, 0.0, None
    for k in range(STEPS):
        x64 = torch.randn(B, D, generator=gx, dtype=torch.float64)
        x = x64.to(dev, torch.float32)
        eager = step(x)
        got = [t.clone() for t in compiled(x)]  # cudagraph outputs are overwritten by the next replay
        torch.cuda.synchronize()
        for name, c, e, r in zip(("all_reduce", "all_gather", "reduce_scatter"), got, eager, reference(x64)):
            okc, ec = close(c, e)
            okr, er = close(e, r)
            worst_c, worst_r = max(worst_c, ec), max(worst_r, er)
            if (not okc or not okr) and bad is None:
                bad = f"step {k} {name}: compiled-eager {ec:.3g}, eager-float64 {er:.3g}"
        if k == 0 and R == 0:
            print(f"first compiled step took {time.monotonic() - t0:.1f} s", flush=True)
    report(bad is None, f"compiled TP MLP equals eager and float64, {STEPS} steps, {W} ranks",
           bad or f"max |compiled-eager| {worst_c:.2g}, max |eager-float64| {worst_r:.2g}")
    from torch._dynamo.utils import counters
    skipped = counters["inductor"]["cudagraph_skips"]  # a Counter: 0 when inductor never skipped
    report(skipped == 0, "reduce-overhead ran as a CUDA graph", f"inductor skipped cudagraphs {skipped} times" if skipped else "")


try:
    main()
except Exception as e:  # a wrong result raises nothing; an error is a failure with its text
    import traceback
    traceback.print_exc()
    report(False, "compiled TP MLP", f"{type(e).__name__}: {e}")
t0 = time.monotonic()
dist.destroy_process_group()
took = time.monotonic() - t0
report(took <= 5, f"destroy_process_group after the compiled graphs ({took:.2f} s)")
print(f"COMPILE-END rank {R} passed={passed} failed={failed}", flush=True)
sys.exit(1 if failed else 0)
