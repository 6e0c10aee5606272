"""What the hypernetwork methods (pFedHN, PeFLL) share: a hypernetwork that maps a client
embedding to every trainable tensor of the target CNN, the server's gradient through the generated
weights, and the server's optimisers written as functions of explicit state.

The server-side work runs in this process (it needs the autograd graph from the hypernetwork's
parameters to the generated weights); the clients' local training goes through the engine as
ordinary jobs started from the generated weights.

The server's gradient (pFedHN eq. 3, PeFLL Algorithm 1): a client starts from theta = h(v; phi),
trains locally to theta~, and sends delta = theta - theta~; the server descends along
  grad_phi = (d theta / d phi)^T delta,
one vector-Jacobian product (`vjp`), without differentiating through the local training.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import torch
import torch.nn as nn
from torch.func import functional_call

from ..engine import Params, SGDConfig
from .base import Context


class HyperNet(nn.Module):
    """pFedHN's CNNHyper without its embedding table: v [E] -> Linear(E, H) -> n_hidden x (ReLU,
    Linear(H, H)) -> one Linear(H, numel) per target tensor, reshaped to the tensor's shape."""

    def __init__(self, embed_dim: int, hidden: int, n_hidden: int, shapes: dict[str, tuple[int, ...]]):
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(embed_dim, hidden)]
        for _ in range(n_hidden):
            layers += [nn.ReLU(), nn.Linear(hidden, hidden)]
        self.mlp = nn.Sequential(*layers)
        self.shapes = dict(shapes)
        self.heads = nn.ModuleDict(
            {_key(name): nn.Linear(hidden, int(np.prod(shape))) for name, shape in shapes.items()}
        )

    def forward(self, v: torch.Tensor) -> dict[str, torch.Tensor]:
        f = self.mlp(v)  # [H]
        return {name: self.heads[_key(name)](f).view(shape) for name, shape in self.shapes.items()}


def _key(name: str) -> str:
    return name.replace(".", "__")  # ModuleDict keys may not contain dots


@functools.lru_cache(maxsize=None)
def target_shapes(spec) -> dict[str, tuple[int, ...]]:
    """The target CNN's trainable tensors and their shapes: what the hypernetwork generates (all of them)."""
    with torch.random.fork_rng(devices=[]):  # building draws initial weights; keep the caller's stream untouched
        return {name: tuple(p.shape) for name, p in spec.build().named_parameters()}


def seeded_params(build, seed: int, purpose: int, index: int = 0) -> Params:
    """The initial parameters of the module `build()` makes, drawn from a stream named by
    (seed, purpose, index); the caller's random stream is left untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(np.random.SeedSequence([seed, purpose, index]).generate_state(1)[0]))
        return {k: v.detach().clone() for k, v in build().state_dict().items()}


def skeleton(build) -> nn.Module:
    """The module without storage (meta device): functional_call supplies its parameters."""
    with torch.device("meta"):
        return build()


def call(module: nn.Module, params: Params, *args):
    """module(*args) with `params` as its parameters (gradients flow to them)."""
    return functional_call(module, params, args)


def vjp(outputs: list[dict[str, torch.Tensor]], deltas: list[dict[str, torch.Tensor]], leaves: Params) -> Params:
    """sum over clients of (d theta_c / d leaves)^T delta_c: one backward pass through every graph."""
    outs = [t for theta in outputs for t in theta.values()]
    grads_out = [d[name] for theta, d in zip(outputs, deltas) for name in theta]
    names = list(leaves)
    grads = torch.autograd.grad(outs, [leaves[n] for n in names], grad_outputs=grads_out, allow_unused=True)
    return {n: torch.zeros_like(leaves[n]) if g is None else g for n, g in zip(names, grads)}


def clip(grads: Params, max_norm: float | None) -> Params:
    """torch.nn.utils.clip_grad_norm_'s rule as a function: scale all by min(1, max_norm / (norm + 1e-6))."""
    if max_norm is None:
        return grads
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return {k: g * scale for k, g in grads.items()}


def sgd_step(
    params: Params, grads: Params, buf: Params | None, lr: float | dict, momentum: float, weight_decay: float
) -> tuple[Params, Params]:
    """torch.optim.SGD's step (dampening 0, not Nesterov) as a function; `lr` a number or per name.

    g = grad + wd p;  b = momentum b + g (the first step's buffer is g, as torch's);  p' = p - lr b.
    Written with one new tensor per result and in-place arithmetic on it, the same operations in the same
    order as the three lines above (bitwise: tests/algorithms/test_rivals.py): the hypernetwork has 42.6 M
    weights, and each temporary was another pass over 170 MB (the step 0.21 -> 0.16 s here). The inputs are
    detached tensors (the server's state), never a graph's: `out=` refuses tensors that require grad."""
    new_p, new_b = {}, {}
    for k, p in params.items():
        g = p.mul(weight_decay).add_(grads[k]) if weight_decay else grads[k]
        if buf is None:
            b = g.clone() if g is grads[k] else g
        else:
            b = buf[k].mul(momentum).add_(g)
        new_b[k] = b
        step = (b if momentum else g).mul(lr[k] if isinstance(lr, dict) else lr)
        new_p[k] = torch.sub(p, step, out=step)
    return new_p, new_b


def adam_step(
    params: Params, grads: Params, state: dict | None, lr: float, betas=(0.9, 0.999), eps: float = 1e-8
) -> tuple[Params, dict]:
    """torch.optim.Adam's step (no weight decay, not AMSGrad) as a function of explicit state:
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  p' = p - lr (m / c1) / (sqrt(v / c2) + eps),
    c_i = 1 - b_i^t. In-place arithmetic on new tensors, the same operations in the same order (as sgd_step)."""
    t = 1 if state is None else state["t"] + 1
    c1, c2 = 1 - betas[0] ** t, 1 - betas[1] ** t
    new, m, v = {}, {}, {}
    for k, p in params.items():
        g = grads[k]
        gm, gv = g.mul(1 - betas[0]), g.mul(1 - betas[1]).mul_(g)
        m[k] = gm if state is None else state["m"][k].mul(betas[0]).add_(gm)
        v[k] = gv if state is None else state["v"][k].mul(betas[1]).add_(gv)
        den = v[k].div(c2).sqrt_().add_(eps)
        step = m[k].div(c1).mul_(lr).div_(den)
        new[k] = torch.sub(p, step, out=step)
    return new, {"t": t, "m": m, "v": v}


def inner_sgd(ctx: Context, lr: float, weight_decay: float, max_grad_norm: float) -> SGDConfig:
    """The clients' local optimiser: the papers' inner SGD (momentum 0.9) at the protocol's batch size."""
    return dataclasses.replace(ctx.sgd, lr=lr, momentum=0.9, weight_decay=weight_decay, max_grad_norm=max_grad_norm)


def steps_of_round(ctx: Context, r: int, purpose: int, per_step: int) -> list[tuple[int, ...]]:
    """Every client once per round, in an order drawn from a stream named by (seed, purpose, r),
    in groups of `per_step`: one server step per group (the papers sample clients per step)."""
    rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, purpose, r]))
    order = [int(i) for i in rng.permutation(ctx.federation.num_clients)]
    return [tuple(order[j : j + per_step]) for j in range(0, len(order), per_step)]


def buffers(params: Params, trainable) -> Params:
    """The entries that are not generated (batch-norm statistics): they stay with the client."""
    return {k: v for k, v in params.items() if k not in trainable}


def round_trip(
    ctx: Context, group: tuple[int, ...], thetas: list[dict], held: list[Params], leaves: Params, sgd: SGDConfig, r: int
) -> tuple[Params | None, dict]:
    """Clients of `group` train from their generated weights `thetas` (as engine jobs, FedAvg's batch
    seeds); returns the mean over the clients that replied of (d theta_c / d leaves)^T (theta_c - theta~_c),
    and {client: its JobResult}. `held[i]` supplies client i's buffers (batch-norm statistics)."""
    jobs = [
        ctx.job(
            {**buffers(held[i], theta), **{k: t.detach() for k, t in theta.items()}}, (i,), False, seed=(r, i), sgd=sgd
        )
        for i, theta in zip(group, thetas)
    ]
    if ctx.traffic is not None:  # each client gets its generated weights and sends back their change
        for i, theta in zip(group, thetas):
            ctx.traffic.send(i, {k: t.detach() for k, t in theta.items()})
    results = ctx.engine.train(ctx.spec(False), jobs)
    ok = [j for j, res in enumerate(results) if res is not None]  # None: dropped out (Flower)
    if ctx.traffic is not None:
        for j in ok:
            ctx.traffic.receive(group[j], {k: results[j].params[k] for k in thetas[j]})
    if not ok:
        return None, {}
    deltas = [{k: thetas[j][k].detach() - results[j].params[k] for k in thetas[j]} for j in ok]
    grads = vjp([thetas[j] for j in ok], deltas, leaves)
    return {k: g / len(ok) for k, g in grads.items()}, {group[j]: results[j] for j in ok}


def mean_loss(results: dict, sizes: np.ndarray) -> float:
    """Size-weighted mean of the clients' local training losses ({client: JobResult})."""
    ids = sorted(results)
    return float(np.average([results[i].mean_loss for i in ids], weights=sizes[ids])) if ids else float("nan")
