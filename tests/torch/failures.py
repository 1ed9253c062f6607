"""failures: how a PyTorch job on flexlink's libnccl ends when a rank fails
(issue 30's PyTorch must-show). One mode per run:

    flexrun -np 4 --oversubscribe --nccl python3 tests/torch/failures.py kill
    flexrun -np 4 --oversubscribe --nccl python3 tests/torch/failures.py withhold
    flexrun -np 2 --oversubscribe --nccl python3 tests/torch/failures.py abort

kill:     a DDP training loop; rank 2 SIGKILLs itself at step 20, after
          printing "KILL-AT <epoch seconds>" (scripts/gpu-failures.sh times
          flexrun's end from it and checks its verdict names rank 2).
withhold: a group made with an 8 s timeout; rank 1 skips one all_reduce on
          it. The other ranks must end with an error; each prints
          "WITHHELD-ERROR rank R after Ts: <message>" (the script checks
          that the message names rank 1).
abort:    rank 1 never calls the 3rd all_reduce, so rank 0's stream waits
          in it (the call itself returns once enqueued); a watchdog thread
          on rank 0 aborts the process group after 2 s and prints
          "ABORT-RETURNED <s>" (abort's own time) and "BLOCKED-RETURNED
          <s>" (from the abort to the end of the stream's wait, or to an
          error from the call).
Rank r uses GPU LOCAL_RANK mod the GPUs it sees.
"""
import os
import signal
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

mode = sys.argv[1]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
torch.cuda.set_device(dev)
dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev, timeout=timedelta(seconds=60))

if mode == "kill":
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(512, 512).to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10_000):
        if rank == 2 and step == 20:
            print(f"KILL-AT {time.time():.3f}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        model(torch.randn(32, 512, device=dev)).square().mean().backward()
        opt.step()
        torch.cuda.synchronize()
elif mode == "withhold":
    g = dist.new_group(list(range(world)), timeout=timedelta(seconds=8))
    x = torch.ones(1024, device=dev)
    for i in range(3):
        if rank == 1 and i == 2:
            time.sleep(60)  # withholds all_reduce #3 on g (the others time out first)
            sys.exit(0)
        t0 = time.time()
        try:
            dist.all_reduce(x, group=g)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - whatever torch raises is the report
            msg = " ".join(str(e).split())[:600]
            print(f"WITHHELD-ERROR rank {rank} after {time.time() - t0:.1f}s: {msg}", flush=True)
            os._exit(1)
    print(f"rank {rank}: no error", flush=True)
elif mode == "abort":
    x = torch.ones(1024, device=dev)
    for i in range(3):
        if rank == 1 and i == 2:
            time.sleep(30)
            os._exit(0)
        if rank == 0 and i == 2:
            def watchdog():
                time.sleep(2)
                t = time.time()
                watchdog.at = t
                dist.distributed_c10d._abort_process_group()
                print(f"ABORT-RETURNED {time.time() - t:.3f}", flush=True)
            watchdog.at = None
            threading.Thread(target=watchdog, daemon=True).start()
            try:
                # The call returns once enqueued (NCCL's semantics, and
                # flexlink's: collectives/plane/async.go); the stream then
                # waits for rank 1 until the abort releases it.
                dist.all_reduce(x)
                torch.cuda.synchronize()
                at = watchdog.at
                if at is None:
                    print("BLOCKED-RETURNED before the abort: all_reduce completed without rank 1", flush=True)
                else:
                    print(f"BLOCKED-RETURNED {time.time() - at:.3f} (the stream released by the abort)", flush=True)
            except Exception as e:  # noqa: BLE001
                at = watchdog.at or time.time()
                print(f"BLOCKED-RETURNED {time.time() - at:.3f} error: {' '.join(str(e).split())[:300]}", flush=True)
            os._exit(0)
        dist.all_reduce(x)
        torch.cuda.synchronize()
