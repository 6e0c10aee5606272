"""The hypernetwork rivals' server work (pFedHN, PeFLL) on the paper's MNIST CNN (42.6 M hypernetwork weights),
each part against its reference, measured in this run, one thread, thread CPU time (best of --repeats):

- the optimiser step: torch's fused kernel (shipped) against torch's single-tensor step
  (FEDCOND_FUSED_SERVER_STEP=0) and against the step written as functions of new tensors (fedcond's before stop 63);
- generating 200 clients' models: 64 per hypernetwork call (shipped, `hypernet.generated`) against one per call;
- a PeFLL group's forward and backward (5 clients' descriptors, their models, the vector-Jacobian product):
  batched, with the label planes added as a bias (shipped) against one model per call and the planes convolved;
- PeFLL's descriptor of a 300-sample client: the label planes as a bias against convolving them.

The last line is `hypernet server: R.RRx` (the geometric mean of the four ratios against the earlier code).

Usage: python benchmarks/hypernet_server.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.nn.functional as F

import fedcond.engine  # noqa: F401 - flushes denormals, as a run does
from fedcond.algorithms import hypernet as H
from fedcond.algorithms.pefll import EmbedNet
from fedcond.engine.memory import keep_freed_memory
from fedcond.models import ModelSpec
from fedcond.models.cpu_kernels.build import cpu_model, vector_isa


def best(fn, repeats: int) -> float:
    out = math.inf
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        out = min(out, time.thread_time() - start)
    return out


def adam_new_tensors(params, grads, state, lr, betas=(0.9, 0.999), eps=1e-8):
    """The server's Adam step as fedcond wrote it before stop 63: new tensors, in-place arithmetic on them."""
    t = state["t"] + 1
    c1, c2 = 1 - betas[0] ** t, 1 - betas[1] ** t
    new, m, v = {}, {}, {}
    for k, p in params.items():
        g = grads[k]
        gm, gv = g.mul(1 - betas[0]), g.mul(1 - betas[1]).mul_(g)
        m[k] = state["m"][k].mul(betas[0]).add_(gm)
        v[k] = state["v"][k].mul(betas[1]).add_(gv)
        den = v[k].div(c2).sqrt_().add_(eps)
        step = m[k].div(c1).mul_(lr).div_(den)
        new[k] = torch.sub(p, step, out=step)
    return new, {"t": t, "m": m, "v": v}


def literal_embedding(net: EmbedNet, x, y):
    """EmbedNet as written before stop 63: the one-hot label planes concatenated and convolved."""
    z = (x.float() / 255.0 - net.mean[0]) / net.std[0]
    onehot = F.one_hot(y, net.num_classes).to(z.dtype)[:, :, None, None].expand(-1, -1, *z.shape[2:])
    h = F.max_pool2d(F.relu(net.conv1(torch.cat([z, onehot], dim=1))), 2)
    h = F.max_pool2d(F.relu(net.conv2(h)), 2).flatten(1)
    return net.fc3(F.relu(net.fc2(F.relu(net.fc1(h)))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    keep_freed_memory()
    torch.manual_seed(0)
    spec = ModelSpec((1, 28, 28), 10, mean=(0.1307,), std=(0.3081,))
    shapes = H.target_shapes(spec)
    n_clients, embed = 200, int(1 + 200 / 4)
    hyper = H.HyperNet(embed, 100, 3, shapes)
    phi = {k: v.detach().clone() for k, v in hyper.state_dict().items()}
    net = H.skeleton(lambda: H.HyperNet(embed, 100, 3, shapes))
    print(f"cpu: {cpu_model()} ({vector_isa()}), torch {torch.__version__}, one thread, "
          f"hypernetwork {sum(v.numel() for v in phi.values()) / 1e6:.1f} M weights")  # fmt: skip
    ratios = {}

    # 1. the optimiser step (Adam: PeFLL's; pFedHN's SGD gains alike)
    grads = {k: torch.randn_like(v) for k, v in phi.items()}
    _, state = H.adam_step(H.owned(phi), grads, None, 2e-4)
    work = H.owned(phi)
    shipped = best(lambda: H.adam_step(work, grads, state, 2e-4), args.repeats)
    os.environ[H.FUSED_ENV] = "0"
    single = best(lambda: H.adam_step(work, grads, state, 2e-4), args.repeats)
    del os.environ[H.FUSED_ENV]
    old = best(lambda: adam_new_tensors(phi, grads, state, 2e-4), args.repeats)
    ratios["server step"] = old / shipped
    print(f"adam step: fused {shipped * 1e3:.0f} ms (fused kernels here: {H.fused('cpu')}), "
          f"single-tensor {single * 1e3:.0f} ms ({single / shipped:.2f}x), "
          f"new tensors {old * 1e3:.0f} ms ({old / shipped:.2f}x)")  # fmt: skip

    # 2. every client's model, as the end of a round regenerates them
    v = torch.randn(n_clients, embed)
    held = [{} for _ in range(n_clients)]
    batched = best(lambda: H.generated(net, phi, v, held), args.repeats)

    def one_by_one():
        with torch.no_grad():
            return [{k: t.clone() for k, t in H.call(net, phi, v[i]).items()} for i in range(n_clients)]

    single_calls = best(one_by_one, args.repeats)
    ratios["200 models"] = single_calls / batched
    print(f"{n_clients} models: {H.CHUNK} per call {batched:.2f} s, one per call {single_calls:.2f} s "
          f"({single_calls / batched:.2f}x)")  # fmt: skip

    # 3. PeFLL's embedding network on one client's 300 samples, forward and backward
    e = EmbedNet((1, 28, 28), 10, embed, (0.1307,), (0.3081,))
    x = torch.randint(0, 256, (300, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (300,))
    fold = best(lambda: e(x, y).mean(0).sum().backward(), args.repeats)
    planes = best(lambda: literal_embedding(e, x, y).mean(0).sum().backward(), args.repeats)
    ratios["descriptor"] = planes / fold
    print(f"descriptor (300 samples, forward + backward): label bias {fold * 1e3:.0f} ms, label planes "
          f"{planes * 1e3:.0f} ms ({planes / fold:.2f}x)")  # fmt: skip

    # 4. a PeFLL group of 5: their models from their descriptors, and the gradient back through the heads
    vs = torch.randn(5, embed)
    deltas = [{k: torch.randn(s) for k, s in shapes.items()} for _ in range(5)]

    def group_batched():
        leaves = {k: t.detach().requires_grad_() for k, t in phi.items()}
        vv = vs.clone().requires_grad_()
        batch = H.call(net, leaves, vv)
        stacked = {k: torch.stack([d[k] for d in deltas]) for k in shapes}
        return H.vjp([batch], [stacked], {**leaves, "v": vv})

    def group_one_by_one():
        leaves = {k: t.detach().requires_grad_() for k, t in phi.items()}
        vv = vs.clone().requires_grad_()
        thetas = [H.call(net, leaves, vv[i]) for i in range(5)]
        return H.vjp(thetas, deltas, {**leaves, "v": vv})

    g_b = best(group_batched, args.repeats)
    g_o = best(group_one_by_one, args.repeats)
    ratios["group of 5"] = g_o / g_b
    print(f"group of 5, generate + vjp: batched {g_b:.2f} s, one per call {g_o:.2f} s ({g_o / g_b:.2f}x)")
    geo = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    print(f"hypernet server: {geo:.2f}x")


if __name__ == "__main__":
    main()
