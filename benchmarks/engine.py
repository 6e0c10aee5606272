"""Engine benchmark: local training of the MNIST CNN for 200 clients x 300 samples, one epoch.

E1 MNIST K=2 super sparse (100 clients per cluster). Timed in one run, on this machine:
  engine      the default backend for this device (CPU: PoolEngine, one single-thread process per core)
  loop        the reference backend (one process, channels-last)
  conventional  what PFLlib / FL-bench do: per client a model copy, a fresh optimiser and a
              DataLoader, NCHW float32, torch's default thread count, the CNN as the SPEC writes it
  ceiling     float32 matmul rate of all cores together (one single-thread process per core)
Prints samples/s, achieved GFLOP/s (FLOPs of forward + backward counted by torch's FlopCounterMode
on the stock layers, i.e. a direct convolution's; where the Winograd kernel runs the conv 32->64 it
does 2.25x fewer multiplies there, so the rate is the model's work per second, not the
instructions executed), peak memory and the ratios; the last line is
`engine/conventional: R.RRx achieved/ceiling: F.FF`.

Usage: python benchmarks/engine.py [--clients 200] [--data-dir DIR]
       python benchmarks/engine.py --device cuda --clients-per-cluster 500   # GPU: VmapEngine, 1,000 clients
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing as mp
import os
import resource
import sys
import time
from statistics import median_high  # the upper median: an element of the list, as timed

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from fedcond import data
from fedcond.engine import Job, LoopEngine, PoolEngine, SGDConfig, batch_order
from fedcond.models import ModelSpec
from fedcond.scenarios import make_scenario


def _matmul_worker(seconds: float, q) -> None:
    torch.set_num_threads(1)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        n += 1
    q.put(2 * 1024**3 * n / (time.perf_counter() - start))


def matmul_ceiling(procs: int, seconds: float = 3.0) -> float:
    """Sum of the fp32 matmul rates of `procs` concurrent single-thread processes, in FLOP/s."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_matmul_worker, args=(seconds, q)) for _ in range(procs)]
    for p in ps:
        p.start()
    rates = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return float(sum(rates))


def flops_per_sample(spec: ModelSpec, batch: int = 64) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    model = spec.build()
    x = torch.randint(0, 256, (batch, *spec.input_shape), dtype=torch.uint8)
    y = torch.randint(0, spec.num_classes, (batch,))
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / batch


def step_breakdown(spec: ModelSpec, sgd: SGDConfig, reps: int = 40) -> list[tuple[str, float, float, float]]:
    """Where one training step goes, on one thread, with the engine's model (channels-last, the
    compiled kernels the self-check kept) and with the stock layers: (stage, kernel s, stock s, FLOPs).

    Each stage runs forward + backward on its own (the SGD step: the update alone), the two models
    and all stages interleaved and the median kept, so the machine's noise hits them alike. FLOPs
    are counted on the stock layers (a direct conv's).
    """
    from torch.utils.flop_counter import FlopCounterMode

    from fedcond.engine.local_sgd import cpu_model

    cl = torch.channels_last
    fast = cpu_model(spec)
    stock = spec.build().to(memory_format=cl)
    stock.load_state_dict(fast.state_dict())
    b = sgd.batch_size
    x = torch.randint(0, 256, (b, *spec.input_shape), dtype=torch.uint8).contiguous(memory_format=cl)
    y = torch.randint(0, spec.num_classes, (b,))
    with torch.no_grad():
        x1 = stock.normalise(x)
        h1 = stock.blocks[0](x1)
        flat = stock.blocks[1](h1).flatten(1)
    h1, flat = (t.detach().requires_grad_() for t in (h1, flat))

    def run(out):
        out.backward(torch.ones_like(out) if out.dim() else None)

    def stages(model):
        first, second = model.blocks
        return {
            "block 1: conv 1->32, pool, ReLU": lambda: run(first(x1)),
            "block 2: conv 32->64, pool, ReLU": lambda: run(second(h1).flatten(1)),
            "FC layers and loss": lambda: run(F.cross_entropy(model.fc2(F.relu(model.fc1(flat))), y)),
            "SGD step (momentum, fused)": torch.optim.SGD(model.parameters(), lr=sgd.lr, momentum=sgd.momentum,
                                                          fused=True).step,  # as train_job
        }

    fast_stages, stock_stages = stages(fast), stages(stock)
    flops = {}
    for name, fn in stock_stages.items():
        with FlopCounterMode(display=False) as counter:
            fn()
        flops[name] = 0.0 if name.startswith("SGD") else counter.get_total_flops()
    grads = {id(m): [torch.randn_like(p) for p in m.parameters()] for m in (fast, stock)}
    times = {(name, which): [] for name in fast_stages for which in ("kernel", "stock")}
    for _ in range(reps):
        for name in fast_stages:
            for which, model, fn in (("kernel", fast, fast_stages[name]), ("stock", stock, stock_stages[name])):
                for t_ in (h1, flat):
                    t_.grad = None  # as in a step: gradients are written, not added to old ones
                for p, g in zip(model.parameters(), grads[id(model)]):
                    p.grad = g if name.startswith("SGD") else None
                t = time.perf_counter()
                fn()
                times[(name, which)].append(time.perf_counter() - t)
    med = {k: median_high(v) for k, v in times.items()}
    return [(name, med[(name, "kernel")], med[(name, "stock")], flops[name]) for name in fast_stages]


def stage_kernels(spec: ModelSpec) -> list[str]:
    """Which compiled kernel runs each conv stage of the engine's model ('stock' where none)."""
    from fedcond.engine.local_sgd import cpu_model

    out = []
    for block in cpu_model(spec).blocks:
        parts = [{"first": "fused first-block kernel", "conv_pool": "fused Winograd kernel",
                  "pool": "pool kernel"}.get(block.kernel, "")]
        if block.kernel not in ("first", "conv_pool") and getattr(block.conv, "winograd", False):
            parts.insert(0, "Winograd conv")
        out.append(" + ".join(p for p in parts if p) or "stock layers")
    return out


def print_machine() -> None:
    """The CPU, its vector ISA, and what the kernels' self-check kept on it (fedcond doctor in short)."""
    from fedcond.commands.doctor import facts

    info = facts()
    k = info["kernels"]
    print(f"machine: {info['cpu']}, vector ISA {info['vector_isa']}, {info['cores']} cores; torch {info['torch']} "
          f"(CPU capability {info['torch_cpu_capability']})")
    if k["not_built"]:
        print(f"kernels: not in use ({k['not_built']})")
        return
    each = ", ".join(f"{n} {'on' if e['on'] else 'off'}" + (f" {e['speedup']:.2f}x" if "speedup" in e else "")
                     for n, e in k["each"].items())
    print(f"kernels: {k['variant']} build for {k['built_for']}, mode {k['mode']}; self-check (kernel vs stock): {each}")


def literal_model(spec: ModelSpec) -> torch.nn.Module:
    """The SPEC's CNN exactly as written (Conv ReLU MaxPool, out-of-place), as other frameworks run it;
    same parameter names as ours, so the same initial weights load."""
    import torch.nn as nn

    model = spec.build()
    for block in model.blocks:
        block.rest = nn.Sequential(nn.ReLU(), nn.MaxPool2d(2))
    return model


def conventional(spec: ModelSpec, init, jobs: list[Job], sgd: SGDConfig, same_batches: bool):
    """Per client: deepcopy, fresh SGD, DataLoader over float NCHW tensors, the literal model."""
    global_model = literal_model(spec)
    global_model.load_state_dict(init)
    out = []
    for job in jobs:
        model = copy.deepcopy(global_model)
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=sgd.lr, momentum=sgd.momentum)
        ds = TensorDataset(job.x.float() / 255.0, job.y)
        if same_batches:  # replay the engine's batch order, to compare results
            sampler = [b.tolist() for b in batch_order(len(job.y), sgd.batch_size, job.epochs, job.seed)]
            loader = DataLoader(ds, batch_sampler=sampler)
        else:
            loader = DataLoader(ds, batch_size=sgd.batch_size, shuffle=True)
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        out.append(model.state_dict())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--data-dir")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--device", default="cpu", help="cpu (PoolEngine) or e.g. cuda (VmapEngine)")
    ap.add_argument("--clients-per-cluster", type=int, default=100)
    args = ap.parse_args()
    if args.device != "cpu":
        return accelerator(args)

    torch.set_num_threads(1)
    print_machine()
    mnist = data.load("mnist", data_dir=args.data_dir)
    sc = make_scenario("E1", "mnist", lambda n: mnist, k=2, clients_per_cluster=args.clients_per_cluster, seed=0)
    fed = sc.federation
    clients = fed.clients[: args.clients]
    spec = ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std)
    torch.manual_seed(0)
    init = spec.build().state_dict()
    sgd = SGDConfig()
    jobs = [Job(params=init, x=c.x_train, y=c.y_train, s=None, epochs=1, seed=(0, i)) for i, c in enumerate(clients)]
    samples = sum(len(j.y) for j in jobs)
    fps = flops_per_sample(spec)
    print(f"workload: {len(jobs)} clients, {samples} samples, 1 epoch, batch {sgd.batch_size}; "
          f"{fps / 1e6:.1f} MFLOP per sample (forward + backward)")

    def report(name, seconds):
        rate = samples / seconds
        print(f"{name:34s} {seconds:7.2f} s {rate:9.0f} samples/s {rate * fps / 1e9:7.1f} GFLOP/s")
        return rate

    # engine: the default backend on this device
    pool = PoolEngine(sgd, workers=args.workers)
    t = time.perf_counter()
    pool.train(spec, jobs[: args.workers * 2])  # start the workers and share the data once
    startup = time.perf_counter() - t
    t = time.perf_counter()
    engine_res = pool.train(spec, jobs)
    engine_rate = report(f"engine (pool, {args.workers} x 1 thread)", time.perf_counter() - t)
    print(f"  (worker start-up and first data transfer, excluded above: {startup:.2f} s)")
    pool.close()

    t = time.perf_counter()
    loop_res = LoopEngine(sgd).train(spec, jobs)
    loop_rate = report("loop backend (1 process)", time.perf_counter() - t)
    identical = all(torch.equal(a.params[k], b.params[k]) for a, b in zip(engine_res, loop_res) for k in a.params)
    print(f"  engine == loop backend, bitwise: {identical}")

    torch.set_num_threads(os.cpu_count() or 1)
    t = time.perf_counter()
    conventional(spec, init, jobs, sgd, same_batches=False)
    conv_rate = report(f"conventional ({torch.get_num_threads()} threads, NCHW)", time.perf_counter() - t)
    ref = conventional(spec, init, jobs[:5], sgd, same_batches=True)
    diff = max(float((r[k] - e.params[k]).abs().max()) for r, e in zip(ref, engine_res[:5]) for k in r)
    print(f"  conventional vs engine on the same batches (5 clients): max |diff| = {diff:.2e}")
    torch.set_num_threads(1)

    ceiling = matmul_ceiling(args.workers)
    print(f"{'ceiling (fp32 matmul, ' + str(args.workers) + ' x 1 thread)':34s} {ceiling / 1e9:27.1f} GFLOP/s")

    # why the engine stops where it does: one step's stages, kernel against stock, and the bound the dominant one sets
    stages = step_breakdown(spec, sgd)
    step = sum(t for _, t, _, _ in stages)
    stock_step = sum(t for _, _, t, _ in stages)
    core = ceiling / args.workers
    used = stage_kernels(spec) + ["stock layers", "fused SGD"]
    print(f"one step (batch {sgd.batch_size}, 1 thread), stage by stage, the engine's model against the stock layers:")
    for (name, t, t_stock, fl), how in zip(stages, used):
        rate = f"{fl / t / 1e9:6.1f} GFLOP/s ({fl / t / core:.2f} of a core's matmul)" if fl else ""
        print(f"  {name:34s} {t * 1e3:6.2f} ms (stock {t_stock * 1e3:6.2f} ms, {t_stock / t:4.2f}x) {100 * t / step:4.0f}% "
              f"of the time {100 * fl / (fps * sgd.batch_size):4.0f}% of the FLOPs  {rate}  [{how}]")
    print(f"  whole step: {step * 1e3:.2f} ms against {stock_step * 1e3:.2f} ms with the stock layers ({stock_step / step:.2f}x)")
    name, t_dom, _, fl_dom = max(stages, key=lambda s: s[3])
    scaling = engine_rate / (args.workers * loop_rate)  # how well the workers together keep up with one alone
    bound = args.workers * scaling * sgd.batch_size / t_dom
    print(f"  bound: were every stage but '{name}' free, {args.workers} workers at this scaling ({scaling:.2f}) would reach "
          f"{bound:.0f} samples/s: engine/conventional <= {bound / conv_rate:.2f}x")
    if "Winograd" in used[1]:  # say what the hardware executes too: the model's FLOPs above count a direct conv
        executed = fps - fl_dom / sgd.batch_size * (1 - 1 / 2.25)
        print(f"  executed arithmetic: {executed / 1e6:.1f} of the model's {fps / 1e6:.1f} MFLOP per sample (Winograd conv); "
              f"{engine_rate * executed / 1e9:.1f} GFLOP/s executed, {engine_rate * executed / ceiling:.2f} of the ceiling")
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(f"peak resident memory (largest process): {peak / 1024:.0f} MiB")
    achieved = engine_rate * fps / ceiling
    print(f"engine/conventional: {engine_rate / conv_rate:.2f}x achieved/ceiling: {achieved:.2f}")


def accelerator(args) -> None:
    """GPU: the vectorised backend against the conventional per-client loop, both on the device."""
    from fedcond.engine import VmapEngine

    dev = torch.device(args.device)
    mnist = data.load("mnist", data_dir=args.data_dir)
    sc = make_scenario("E1", "mnist", lambda n: mnist, k=2, clients_per_cluster=args.clients_per_cluster, seed=0)
    fed = sc.federation
    spec = ModelSpec(fed.input_shape, fed.num_classes, 0, "concat", fed.mean, fed.std)
    torch.manual_seed(0)
    init = spec.build().state_dict()
    sgd = SGDConfig()
    jobs = [Job(params=init, x=c.x_train, y=c.y_train, s=None, epochs=1, seed=(0, i)) for i, c in enumerate(fed.clients)]
    samples = sum(len(j.y) for j in jobs)
    fps = flops_per_sample(spec)
    print(f"workload: {len(jobs)} clients, {samples} samples, 1 epoch on {dev}")
    eng = VmapEngine(sgd, device=args.device, chunk=len(jobs))
    eng.train(spec, jobs[:8])  # warm-up: kernels, data residency
    torch.cuda.synchronize()
    t = time.perf_counter()
    res = eng.train(spec, jobs)
    torch.cuda.synchronize()
    t_eng = time.perf_counter() - t
    model = literal_model(spec).to(dev)
    model.load_state_dict(init)
    t = time.perf_counter()
    for job in jobs:  # conventional: a copy, a fresh optimiser and a DataLoader per client, on the device
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=sgd.lr, momentum=sgd.momentum)
        loader = DataLoader(TensorDataset((job.x.float() / 255.0), job.y), batch_size=sgd.batch_size, shuffle=True)
        for xb, yb in loader:
            loss = F.cross_entropy(m(xb.to(dev)), yb.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.cuda.synchronize()
    t_conv = time.perf_counter() - t
    a = torch.randn(8192, 8192, device=dev)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
    ceiling = 10 * 2 * 8192**3 / (time.perf_counter() - t)
    print(f"vmap engine {samples / t_eng:10.0f} samples/s; conventional {samples / t_conv:8.0f} samples/s; "
          f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB; steps checked {sum(r.steps for r in res)}")
    print(f"engine/conventional: {t_conv / t_eng:.2f}x achieved/ceiling: {samples / t_eng * fps / ceiling:.2f}")


if __name__ == "__main__":
    sys.exit(main())
