"""A CIFAR-10 configuration end to end on a GPU, against this machine's CPU (issue 42, item 5).

Runs each method of one configuration (default E1/cifar10/K=2/rich, FedAvg and Conditional) for
the protocol's passes on the device (the engine's VmapEngine: every client of a round trained as one
vectorised batch), then the same methods for --cpu-epochs passes on the CPU (the LoopEngine, one
thread: what `fedcond sweep --workers 1` runs), and prints per method the seconds a pass costs on
each and their ratio, with the device run's accuracy beside the published one. The CPU is timed on
fewer passes because a paper CIFAR method takes 30-50 minutes there; a pass costs the same in
every round (no schedule), so seconds per pass compare.

    python benchmarks/cifar_gpu.py                         # on a GPU machine: the paper protocol
    python benchmarks/cifar_gpu.py --device cpu --fraction 0.02 --epochs 1   # a smoke run anywhere

Without a usable CUDA device it says so in one line and exits 2 (nothing is timed). The data are
read from $FEDCOND_DATA (carry them to the device machine in an ignored folder). The last line is
`gpu/cpu: R.RRx` (the CPU's seconds per pass over the device's, the slowest method's).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _published(experiment: str, method: str) -> float | None:
    """The paper's value of this cell (the report's reading of paper_results.csv), if it has one."""
    from fedcond.report.data import published_for, published_tables

    return published_for(published_tables(), experiment, method)


def _timed(spec, methods, protocol, device: str) -> dict[str, tuple[float, float]]:
    """{method: (seconds, accuracy)} of each method run alone on `device`."""
    from fedcond.run import run_methods

    out = {}
    for m in methods:
        start = time.perf_counter()
        (res,) = list(run_methods(spec, [m], protocol, seed=0, workers=1, device=device))
        out[m] = (time.perf_counter() - start, res.accuracy)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="E1/cifar10/K=2/rich")
    ap.add_argument("--methods", default="FedAvg,Conditional")
    ap.add_argument("--device", default="cuda", help="the device to time (cuda, cuda:N; cpu for a smoke run)")
    ap.add_argument("--epochs", type=int, help="passes on the device (default: the experiment's preset, 20)")
    ap.add_argument("--cpu-epochs", type=int, default=1, help="passes timed on the CPU (default 1)")
    ap.add_argument("--fraction", type=float, default=1.0, help="of every split (default 1)")
    args = ap.parse_args(argv)

    import torch

    from fedcond.engine import check_device
    from fedcond.errors import FedcondError
    from fedcond.experiments import EXPERIMENTS, PROTOCOLS
    from fedcond.models.cpu_kernels.build import cpu_model

    try:
        check_device(args.device)
        if args.experiment not in EXPERIMENTS:
            raise FedcondError(f"unknown experiment '{args.experiment}'")
    except FedcondError as e:
        print(f"cifar_gpu: {e}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    exp = EXPERIMENTS[args.experiment]
    spec = exp.spec(seed=0, data_dir=os.environ.get("FEDCOND_DATA"), fraction=args.fraction)
    base = PROTOCOLS[exp.preset][0]
    device_protocol = base.replace(epochs=args.epochs)
    cpu_protocol = base.replace(epochs=args.cpu_epochs)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    name = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else "cpu"
    print(f"{args.experiment}, fraction {args.fraction}: {args.device} ({name}) {device_protocol.epochs} passes; "
          f"cpu ({cpu_model()}, one thread) {cpu_protocol.epochs} passes")
    on_device = _timed(spec, methods, device_protocol, args.device)
    on_cpu = _timed(spec, methods, cpu_protocol, "cpu")
    print("| method | device s/pass | cpu s/pass | cpu / device | device accuracy | published |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for m in methods:
        d = on_device[m][0] / device_protocol.epochs
        c = on_cpu[m][0] / cpu_protocol.epochs
        ratios.append(c / d)
        pub = _published(args.experiment, m)
        print(f"| {m} | {d:.2f} | {c:.2f} | {c / d:.2f}x | {on_device[m][1]:.4f} | "
              f"{'-' if pub is None or args.fraction < 1 else f'{pub:.3f}'} |")
    print(f"gpu/cpu: {min(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
