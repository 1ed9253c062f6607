"""common: the harness of flexlink's PyTorch suite (tests/torch).

Every test file builds a Suite, registers checks with Suite.check and ends
with Suite.finish. A check is a function that raises on a wrong result
(Fail, AssertionError or whatever torch raised), raises Skip when the check
cannot run here (torch refuses the dtype, too few ranks), or returns None or
a short note. After each check the ranks agree over a gloo group (CPU, so
it does not depend on the library under test), and rank 0 prints one line:

    PASS name[ (note)]
    FAIL name: rank R: detail
    SKIP name: reason

Rank 0 prints ".. name" before each check (so a run that dies names the
check it died in) and "SUITE-END <file> passed=P failed=F skipped=S" last.
A watchdog thread on every rank ends the process (exit 3) when one check
runs past its limit, printing "FAIL name: timed out" first (rank 0), so a
hang costs one check's limit, not the whole run.

Environment: flexrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT. Rank r uses GPU LOCAL_RANK mod the GPUs it sees (on a one-GPU
machine every rank shares cuda:0). Without
them (python3 file.py) the suite runs as one rank.
"""
import argparse
import os
import sys
import threading
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=60)  # init_process_group and every group made here


class Skip(Exception):
    """The check cannot run here; the reason is printed, it is not a failure."""


class Fail(Exception):
    """A wrong result; the message says what was wrong."""


def is_backend_error(e):
    """True when e came from the communication library (NCCL or ours), not
    from torch refusing the call before it reached the library."""
    dbe = getattr(dist, "DistBackendError", None)
    if dbe is not None and isinstance(e, dbe):
        return True
    # torch's own refusals may name NCCL ("... not supported for NCCL
    # reductions"); the library's failures come as "NCCL error in: ...".
    s = str(e)
    return any(w in s for w in ("NCCL error", "ncclInvalid", "ncclInternal", "ncclSystem",
                                "ncclUnhandled", "ncclRemote", "ncclInProgress"))


def torch_refuses(e, *words):
    """True when torch itself refused the call (a TypeError/RuntimeError of
    its own naming one of words), so the check is a SKIP, not a FAIL."""
    if is_backend_error(e):
        return False
    s = str(e).lower()
    return any(w.lower() in s for w in words)


def parse_args(argv=None, sections=()):
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated sections to run (default: all but those run on their own)")
    p.add_argument("--lazy", action="store_true", help="lazy init: init_process_group without device_id")
    p.add_argument("--quick", action="store_true", help="fewer dtypes and sizes")
    p.add_argument("--label", default="", help="prefix of every check name (the run's label)")
    a = p.parse_args(argv)
    a.sections = [s for s in a.only.split(",") if s] if a.only else list(sections)
    return a


def _raiser(e):
    def f():
        raise e
    return f


class Suite:
    def __init__(self, file_label, lazy=False, label=""):
        self.file = file_label
        self.prefix = (label + ":") if label else ""
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        os.environ.setdefault("RANK", str(self.rank))
        os.environ.setdefault("WORLD_SIZE", str(self.world))
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        self.lazy = lazy
        self.counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
        self._current = ("startup", time.time() + 300)  # the first kernel load may JIT for a minute
        self._lock = threading.Lock()
        threading.Thread(target=self._watchdog, name="suite-watchdog", daemon=True).start()

        self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(self.device)
        t0 = time.time()
        kw = dict(backend="nccl", timeout=TIMEOUT)
        if not lazy:
            kw["device_id"] = self.device
        dist.init_process_group(**kw)
        # The referee: a gloo group over the same ranks, CPU only.
        self.gloo = dist.new_group(backend="gloo", timeout=TIMEOUT)
        self.say(f"# {self.file}: rank 0 of {self.world}, torch {torch.__version__}, "
                 f"nccl version reported {self._nccl_version()}, {'lazy' if lazy else 'eager (device_id)'} init, "
                 f"init {time.time() - t0:.1f}s")

    # ---- output -------------------------------------------------------
    def say(self, line):
        if self.rank == 0:
            print(line, flush=True)

    @staticmethod
    def _nccl_version():
        try:
            v = torch.cuda.nccl.version()
            return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception as e:  # noqa: BLE001
            return f"unknown ({e})"

    # ---- the watchdog -------------------------------------------------
    def _set(self, name, limit):
        with self._lock:
            self._current = (name, time.time() + limit)

    def _watchdog(self):
        while True:
            time.sleep(1.0)
            with self._lock:
                name, deadline = self._current
            if deadline and time.time() > deadline:
                msg = f"timed out (hang?) on rank {self.rank}; the run ends here"
                if self.rank == 0:
                    print(f"FAIL {self.prefix}{name}: {msg}", flush=True)
                print(f"[rank {self.rank}] watchdog: {name} {msg}", file=sys.stderr, flush=True)
                os._exit(3)

    # ---- checks -------------------------------------------------------
    def check(self, name, fn, limit=60.0):
        """Run fn on every rank, agree on the outcome, print one line."""
        full = self.prefix + name
        self.say(f".. {full}")
        self._set(full, limit)
        status, detail = "PASS", ""
        t0 = time.time()
        try:
            note = fn()
            torch.cuda.synchronize()
            if note:
                detail = str(note)
        except Skip as e:
            status, detail = "SKIP", str(e)
        except Exception as e:  # noqa: BLE001 - every failure is reported, the suite goes on
            status = "FAIL"
            first = str(e).strip().splitlines()
            detail = f"{type(e).__name__}: {first[0] if first else ''}"
            if len(first) > 1:
                # torch's messages put the library's words on later lines
                extra = " | ".join(l.strip() for l in first[1:4] if l.strip())
                detail += f" | {extra}"
            if not isinstance(e, (Fail, AssertionError)):
                tb = traceback.extract_tb(e.__traceback__)
                here = [f for f in tb if "tests/torch" in f.filename]
                if here:
                    detail += f" (at {os.path.basename(here[-1].filename)}:{here[-1].lineno})"
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
        detail = detail[:500]
        outcomes = [None] * self.world
        dist.all_gather_object(outcomes, (status, detail), group=self.gloo)
        fails = [(r, d) for r, (s, d) in enumerate(outcomes) if s == "FAIL"]
        skips = [(r, d) for r, (s, d) in enumerate(outcomes) if s == "SKIP"]
        secs = time.time() - t0
        if fails:
            status = "FAIL"
            detail = "; ".join(f"rank {r}: {d}" for r, d in fails[:4])
        elif len(skips) == self.world:
            status, detail = "SKIP", skips[0][1]
        else:
            status = "PASS"
            notes = [d for s, d in outcomes if s == "PASS" and d]
            detail = notes[0] if notes else ""
        self.counts[status] += 1
        if status == "PASS":
            self.say(f"PASS {full}" + (f" ({detail})" if detail else "") + (f" [{secs:.1f}s]" if secs >= 5 else ""))
        else:
            self.say(f"{status} {full}: {detail}")
        self._set("between checks", 120)
        return status == "PASS"

    def run_sections(self, warmup, sections, scope):
        """The warm-up check, then each section (scope["section_" + name]());
        a section whose setup raises is a FAIL of its own; then finish()."""
        self.check("warmup.all_reduce", warmup, limit=240)
        for sec in sections:
            fn = scope.get(f"section_{sec}")
            if fn is None:
                self.say(f"# unknown section {sec}")
                self.counts["FAIL"] += 1
                continue
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - a section's setup failing is a FAIL of its own
                self.check(f"{sec}.setup", _raiser(e))
        self.finish()

    def finish(self):
        """Destroy the process groups (a check of its own, judged by each
        rank alone: the referee group is gone afterwards) and print the end."""
        full = self.prefix + "teardown.destroy_process_group"
        self.say(f".. {full}")
        self._set(full, 60)
        ok, detail = True, ""
        try:
            torch.cuda.synchronize()
            dist.barrier(group=self.gloo)
            dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001
            ok, detail = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if ok:
            self.counts["PASS"] += 1
            self.say(f"PASS {full}")
        else:
            self.counts["FAIL"] += 1
            self.say(f"FAIL {full}: rank {self.rank}: {detail}")
            if self.rank != 0:
                print(f"[rank {self.rank}] FAIL-teardown {detail}", file=sys.stderr, flush=True)
        c = self.counts
        self.say(f"SUITE-END {self.prefix}{self.file} passed={c['PASS']} failed={c['FAIL']} skipped={c['SKIP']}")
        self._set("exit", 30)
        sys.stdout.flush()
        sys.stderr.flush()
        # Only rank 0 reports failed checks in its exit status (the launcher
        # must not tear rank 0 down before it printed the end); another
        # rank's status says only whether its own teardown worked.
        if self.rank == 0:
            os._exit(1 if c["FAIL"] else 0)
        os._exit(0 if ok else 4)


# ---- values and comparisons shared by the files ---------------------------

def compare(got, want, what, rtol=0.0, atol=0.0):
    """got, want: CPU tensors of one dtype (int64 or float64). Exact unless
    tolerances are given; raises Fail naming the first wrong element."""
    if got.shape != want.shape:
        raise Fail(f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    if rtol == 0.0 and atol == 0.0:
        bad = got != want
    else:
        bad = (got - want).abs() > (atol + rtol * want.abs())
        bad |= torch.isnan(got) if got.is_floating_point() else torch.zeros_like(bad)
    nbad = int(bad.sum().item())
    if nbad:
        i = int(bad.nonzero()[0].item()) if got.dim() == 1 else bad.nonzero()[0].tolist()
        g = got.flatten()[bad.flatten().nonzero()[0]].item()
        w = want.flatten()[bad.flatten().nonzero()[0]].item()
        raise Fail(f"{what}: {nbad} of {want.numel()} elements wrong (first at {i}: got {g}, want {w})")


def close(a, b, rtol, atol):
    """max |a-b| and whether a is within tolerance of b (float tensors)."""
    a = a.detach().double().cpu()
    b = b.detach().double().cpu()
    d = (a - b).abs()
    ok = bool((d <= atol + rtol * b.abs()).all().item()) and not bool(torch.isnan(a).any().item())
    return ok, float(d.max().item()) if d.numel() else 0.0
