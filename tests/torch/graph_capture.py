"""graph_capture: collectives captured in a CUDA graph (issue 29).

Each check captures one collective with torch.cuda.graph (default capture
mode: global), then replays it REPLAYS times, writing new inputs into the
captured input tensor before each replay, and compares the output with an
independent float64 reference every time and with the eager call on the
same input every 100 replays. destroy_process_group after the captures
must return within 5 s.

Run as one process on torch's NCCL (the anchor) or under LD_PRELOAD of
flexlink's libnccl, or under flexrun --nccl for more ranks (ranks share
cuda:0). Prints "PASS name", "FAIL name: detail" or "SKIP name: reason"
per check and "GRAPH-END passed=P failed=F skipped=S"; exit 1 on a failure.
"""
import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

REPLAYS = int(os.environ.get("REPLAYS", "1000"))
N = int(os.environ.get("COUNT", "4099"))  # odd: no multiple of anything

if "RANK" not in os.environ:
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29571"))
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev, timeout=timedelta(seconds=120))
R, W = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")


def value(r, k, n):
    """Rank r's input for round k: small integers, exact in float32 sums."""
    i = torch.arange(n, dtype=torch.float64)
    return torch.remainder(i * 3 + r * 7 + k * 13, 29) - 14


def ref_sum(k, n):
    return sum(value(r, k, n) for r in range(W))


class Case:
    """One collective: make(k) fills the inputs for round k, run() issues
    it on the current stream, expect(k) is this rank's float64 reference,
    out is the output tensor."""

    def __init__(self, name, make, run, expect, out):
        self.name, self.make, self.run, self.expect, self.out = name, make, run, expect, out


def cases():
    cs = []
    x = torch.zeros(N, device=dev)
    y = torch.zeros(N, device=dev)

    def ar_make(k):
        x.copy_(value(R, k, N))

    cs.append(Case("all_reduce", ar_make, lambda: (y.copy_(x), dist.all_reduce(y)), lambda k: ref_sum(k, N), y))

    ag_in = torch.zeros(N, device=dev)
    ag_out = torch.zeros(W * N, device=dev)
    cs.append(Case("all_gather_into_tensor", lambda k: ag_in.copy_(value(R, k, N)),
                   lambda: dist.all_gather_into_tensor(ag_out, ag_in),
                   lambda k: torch.cat([value(r, k, N) for r in range(W)]), ag_out))

    rs_in = torch.zeros(W * N, device=dev)
    rs_out = torch.zeros(N, device=dev)
    cs.append(Case("reduce_scatter_tensor", lambda k: rs_in.copy_(value(R, k, W * N)),
                   lambda: dist.reduce_scatter_tensor(rs_out, rs_in),
                   lambda k: ref_sum(k, W * N)[R * N:(R + 1) * N], rs_out))

    a2a_in = torch.zeros(W * N, device=dev)
    a2a_out = torch.zeros(W * N, device=dev)
    cs.append(Case("all_to_all_single", lambda k: a2a_in.copy_(value(R, k, W * N)),
                   lambda: dist.all_to_all_single(a2a_out, a2a_in),
                   lambda k: torch.cat([value(r, k, W * N)[R * N:(R + 1) * N] for r in range(W)]), a2a_out))

    bc = torch.zeros(N, device=dev)
    root = W - 1
    cs.append(Case("broadcast", lambda k: bc.copy_(value(R, k, N)), lambda: dist.broadcast(bc, src=root),
                   lambda k: value(root, k, N), bc))

    red = torch.zeros(N, device=dev)
    cs.append(Case("reduce", lambda k: red.copy_(value(R, k, N)), lambda: dist.reduce(red, dst=0),
                   lambda k: ref_sum(k, N) if R == 0 else value(R, k, N), red))

    if W >= 2:
        snd = torch.zeros(N, device=dev)
        rcv = torch.zeros(N, device=dev)
        nxt, prv = (R + 1) % W, (R - 1) % W

        def p2p():
            ops = [dist.P2POp(dist.isend, snd, nxt), dist.P2POp(dist.irecv, rcv, prv)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

        cs.append(Case("batch_isend_irecv", lambda k: snd.copy_(value(R, k, N)), p2p, lambda k: value(prv, k, N), rcv))
    return cs


def check(c):
    # Warm up eagerly on a side stream, as torch's documentation asks.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        c.make(0)
        c.run()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        c.run()
    torch.cuda.synchronize()
    for k in range(1, REPLAYS + 1):
        c.make(k)
        g.replay()
        got = c.out.double().cpu()
        want = c.expect(k)
        if not torch.equal(got, want):
            bad = (got != want).nonzero()
            i = bad[0].item()
            raise AssertionError(f"replay {k}: {len(bad)} wrong elements, first {i}: {got[i].item()} want {want[i].item()}")
        if k % 100 == 0:
            replayed = got.clone()
            c.make(k)
            c.run()
            eager = c.out.double().cpu()
            if not torch.equal(eager, replayed):
                raise AssertionError(f"round {k}: eager differs from the replay")
    del g
    return f"{REPLAYS} replays"


passed = failed = skipped = 0
for c in cases():
    try:
        note = check(c)
        ok, msg = True, note
    except Exception as e:  # the library's refusal comes as a RuntimeError/DistBackendError
        ok, msg = False, f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        if os.environ.get("GRAPH_TRACE"):
            traceback.print_exc()
    oks = [None] * W
    dist.all_gather_object(oks, (ok, msg), group=gloo)
    if R == 0:
        bad = [(r, m) for r, (o, m) in enumerate(oks) if not o]
        if bad:
            failed += 1
            print(f"FAIL {c.name}: rank {bad[0][0]}: {bad[0][1]}", flush=True)
        else:
            passed += 1
            print(f"PASS {c.name} ({msg})", flush=True)
    torch.cuda.synchronize()

t0 = time.time()
dist.destroy_process_group()
took = time.time() - t0
if R == 0:
    if took <= 5:
        passed += 1
        print(f"PASS destroy_process_group ({took:.2f} s)", flush=True)
    else:
        failed += 1
        print(f"FAIL destroy_process_group: took {took:.1f} s, want <= 5", flush=True)
    print(f"GRAPH-END passed={passed} failed={failed} skipped={skipped}", flush=True)
sys.exit(1 if failed else 0)
