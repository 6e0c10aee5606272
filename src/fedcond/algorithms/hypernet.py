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
import os

import numpy as np
import torch
import torch.nn as nn
from torch.func import functional_call
from torch.optim.adam import adam as torch_adam  # torch.optim's steps as functions of explicit state
from torch.optim.sgd import sgd as torch_sgd

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
        """v [E] -> one model; v [B, E] -> B models stacked (name -> [B, *shape]): one pass over the
        heads' weights for the batch, where B calls would read them B times."""
        f = self.mlp(v)  # [H] or [B, H]
        lead = tuple(v.shape[:-1])
        return {name: self.heads[_key(name)](f).view(*lead, *shape) for name, shape in self.shapes.items()}


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
    """torch.nn.utils.clip_grad_norm_'s rule: scale all by min(1, max_norm / (norm + 1e-6)), in place
    (the gradients are the caller's own, fresh from `vjp`: no second copy of 42.6 M weights); returns them."""
    if max_norm is None:
        return grads
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()]))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads.values():
        g.mul_(scale)
    return grads


FUSED_ENV = "FEDCOND_FUSED_SERVER_STEP"  # "0": torch's single-tensor optimiser steps instead of its fused kernels


@functools.lru_cache(maxsize=None)
def _fused_supported(device: str) -> bool:
    """Does this torch have fused SGD and Adam kernels for `device` (CPU: from torch 2.4)? Tried once on a
    tiny tensor; an older torch refuses fused=True with a RuntimeError before touching anything."""
    try:
        p, g = torch.zeros(2, device=device), torch.ones(2, device=device)
        torch_sgd([p], [g], [None], fused=True, weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.0,
                  nesterov=False, maximize=False)  # fmt: skip
        m, v, t = torch.zeros_like(p), torch.zeros_like(p), torch.zeros((), device=device)
        torch_adam([p], [g], [m], [v], [], [t], fused=True, amsgrad=False, beta1=0.9, beta2=0.999,
                   lr=0.1, weight_decay=0.0, eps=1e-8, maximize=False)  # fmt: skip
        return True
    except (RuntimeError, TypeError):
        return False


def fused(device: torch.device | str) -> bool:
    """The server steps' path: torch's fused kernel where it has one for the device, unless turned off
    (FEDCOND_FUSED_SERVER_STEP=0)."""
    return os.environ.get(FUSED_ENV, "1") != "0" and _fused_supported(torch.device(device).type)


def owned(tree):
    """A copy of the server's state (tensors in dicts, lists, tuples) that a round may update in place,
    leaving the state it was given as it was (an earlier State stays valid)."""
    if isinstance(tree, torch.Tensor):
        return tree.clone()
    if isinstance(tree, dict):
        return {k: owned(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(owned(v) for v in tree)
    return tree


def sgd_step(
    params: Params, grads: Params, buf: Params | None, lr: float | dict, momentum: float, weight_decay: float
) -> tuple[Params, Params | None]:
    """torch.optim.SGD's step (dampening 0, not Nesterov), IN PLACE on `params` and `buf` (None on the first
    step: the buffers are made here, the gradient as torch's); `lr` a number or per name. Returns (params, buf).

    torch's own implementation (torch.optim.sgd.sgd): its fused kernel where this torch has one for the device,
    one pass over each tensor, else its single-tensor step. The hypernetwork has 42.6 M weights (170 MB), and
    the step written as functions of new tensors made about 15 passes over them (0.067 s against 0.016 fused,
    AMD EPYC Zen 4; benchmarks/hypernet_server.py). A round updates its own copy (`owned`)."""
    names = list(params)
    bufs: list = [None] * len(names) if buf is None else [buf[k] for k in names]
    rates = {k: lr[k] if isinstance(lr, dict) else lr for k in names}
    use_fused = fused(next(iter(params.values())).device) if names else False
    for rate in dict.fromkeys(rates.values()):  # torch's step takes one learning rate: one call per rate
        idx = [j for j, k in enumerate(names) if rates[k] == rate]
        sub = [bufs[j] for j in idx]
        torch_sgd(
            [params[names[j]] for j in idx],
            [grads[names[j]] for j in idx],
            sub,
            foreach=False,
            fused=use_fused,
            weight_decay=weight_decay,
            momentum=momentum,
            lr=rate,
            dampening=0.0,
            nesterov=False,
            maximize=False,
        )
        for j, b in zip(idx, sub):  # the first step fills the list with the new buffers
            bufs[j] = b
    return params, (dict(zip(names, bufs)) if momentum else None)


def adam_step(
    params: Params, grads: Params, state: dict | None, lr: float, betas=(0.9, 0.999), eps: float = 1e-8
) -> tuple[Params, dict]:
    """torch.optim.Adam's step (no weight decay, not AMSGrad), IN PLACE on `params` and the state's moments
    (None: the first step, from zero moments); the state is {"t": steps taken, "m": ..., "v": ...}.
    torch's own implementation, fused where it can be (as sgd_step: 0.157 s -> 0.025 per step here)."""
    names = list(params)
    if state is None:
        state = {"t": 0, "m": {k: torch.zeros_like(p) for k, p in params.items()},
                 "v": {k: torch.zeros_like(p) for k, p in params.items()}}  # fmt: skip
    if not names:
        return params, {**state, "t": state["t"] + 1}
    device = next(iter(params.values())).device
    steps = [torch.tensor(float(state["t"]), device=device) for _ in names]  # torch adds one before the step
    torch_adam(
        [params[k] for k in names],
        [grads[k] for k in names],
        [state["m"][k] for k in names],
        [state["v"][k] for k in names],
        [],
        steps,
        foreach=False,
        fused=fused(device),
        amsgrad=False,
        beta1=betas[0],
        beta2=betas[1],
        lr=lr,
        weight_decay=0.0,
        eps=eps,
        maximize=False,
    )
    return params, {"t": state["t"] + 1, "m": state["m"], "v": state["v"]}


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
    ctx: Context, group: tuple[int, ...], batch: dict, held: list[Params], leaves: Params, sgd: SGDConfig, r: int
) -> tuple[Params | None, dict]:
    """Clients of `group` train from their generated weights (`batch`: name -> [G, *shape], row j for
    group[j], still attached to the graph from `leaves`) as engine jobs (FedAvg's batch seeds); returns the
    mean over the clients that replied of (d theta_c / d leaves)^T (theta_c - theta~_c), and {client: its
    JobResult}. `held[i]` supplies client i's buffers (batch-norm statistics). The deltas go back stacked,
    a dropped client's row zero: one backward pass through the batched heads."""
    thetas = [{k: t[j].detach() for k, t in batch.items()} for j in range(len(group))]
    jobs = [
        ctx.job({**buffers(held[i], theta), **theta}, (i,), False, seed=(r, i), sgd=sgd)
        for i, theta in zip(group, thetas)
    ]
    if ctx.traffic is not None:  # each client gets its generated weights and sends back their change
        for i, theta in zip(group, thetas):
            ctx.traffic.send(i, theta)
    results = ctx.engine.train(ctx.spec(False), jobs)
    ok = [j for j, res in enumerate(results) if res is not None]  # None: dropped out (Flower)
    if ctx.traffic is not None:
        for j in ok:
            ctx.traffic.receive(group[j], {k: results[j].params[k] for k in thetas[j]})
    if not ok:
        return None, {}
    pairs = list(zip(thetas, results))
    deltas = {  # [G, *shape]
        k: torch.stack([th[k] - res.params[k] if res is not None else torch.zeros_like(th[k]) for th, res in pairs])
        for k in batch
    }
    grads = vjp([batch], [deltas], leaves)
    for g in grads.values():
        g.div_(len(ok))
    return grads, {group[j]: results[j] for j in ok}


CHUNK = 64  # clients generated per hypernetwork call in `generated`: 64 models of the paper's CNN are 108 MB


def generated(net: nn.Module, params: Params, v: torch.Tensor, held: list[Params]) -> tuple[Params, ...]:
    """Every client's model h(v_i; params) ([N, E] embeddings), with the buffers it holds: CHUNK clients per
    call, so the heads' 42.6 M weights are read once a chunk instead of once a client. Each model's tensors
    are its own (copied out of the batch)."""
    out: list[Params] = []
    with torch.no_grad():
        for lo in range(0, len(held), CHUNK):
            batch = call(net, params, v[lo : lo + CHUNK])
            for j, w in enumerate(held[lo : lo + CHUNK]):
                out.append({**buffers(w, batch), **{k: t[j].clone() for k, t in batch.items()}})
    return tuple(out)


def mean_loss(results: dict, sizes: np.ndarray) -> float:
    """Size-weighted mean of the clients' local training losses ({client: JobResult})."""
    ids = sorted(results)
    return float(np.average([results[i].mean_loss for i in ids], weights=sizes[ids])) if ids else float("nan")
