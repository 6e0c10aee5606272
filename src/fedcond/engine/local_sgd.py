"""Local training of many models, the seam every algorithm goes through.

An algorithm describes *what* to train as a list of `Job`s (start weights, data, epochs, a seed
key for the batch order); the engine decides *how*. This module is the reference backend: a
plain loop, one job after another, in channels-last layout (2.1x faster than NCHW on these CPUs
for the MNIST CNN). Batch orders come from `batch_order`, outside any model code, so a
vectorised backend can replay exactly the same batches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import denormals, precision
from .memory import keep_freed_memory

Params = dict[str, torch.Tensor]  # a model's state_dict: parameters and buffers


@dataclass(frozen=True)
class SGDConfig:
    """Local optimiser (SPEC A.4): SGD lr 0.01, momentum 0.9, batch 64, cross-entropy."""

    lr: float = 0.01
    momentum: float = 0.9
    batch_size: int = 64
    weight_decay: float = 0.0
    max_grad_norm: float | None = None  # clip each step's whole gradient (regulariser terms included) to this norm
    precision: str = "fp32"  # fp32 | bf16: each step's forward under bf16 autocast, fp32 master weights (precision.py)
    drop_last: bool = False  # drop each epoch's partial last batch (DataLoader(drop_last=True)); a reading (issue 40)

    @classmethod
    def of(cls, protocol) -> "SGDConfig":
        """The optimiser a training protocol (protocol.Protocol) names: lr, momentum, batch size, precision."""
        return cls(
            protocol.lr,
            protocol.momentum,
            protocol.batch_size,
            precision=protocol.precision,
            drop_last=protocol.drop_last,
        )


@dataclass
class Job:
    """One model trained for `epochs` passes over (x, y[, s]), starting from `params`."""

    params: Params
    x: torch.Tensor  # uint8 [n, C, H, W]
    y: torch.Tensor  # int64 [n]
    s: torch.Tensor | None  # float32 [n, L] per-sample statistics, or None for plain models
    epochs: int
    seed: tuple[int, ...]  # names this job's batch-order stream
    momentum: Params | None = None  # carried-over momentum buffers (None: start from zero)
    keep_momentum: bool = False  # return the final buffers (only methods that carry them need the bytes)
    sgd: SGDConfig | None = None  # overrides the engine's optimiser (e.g. Ditto's plain SGD)
    regulariser: "Regulariser | None" = None  # proximal / linear terms (FedProx, SCAFFOLD, FedDyn, FedDC, Ditto)
    loss_fn: Callable | None = None  # picklable (model, x, s, y) -> loss; replaces cross-entropy (FedProc, JDFL)
    # A loss_fn whose body stays frozen for the whole job (FedRep's head update) may say so with
    # `frozen_features = True` and a `head_loss(model, z, x, y)` on the body's features z: the engine then
    # computes the features once per job instead of every step (frozen_features below).

    @property
    def plain(self) -> bool:
        """Plain SGD on cross-entropy from a fresh optimiser: what DP-SGD can privatise (flower/dp.py)."""
        return self.regulariser is None and self.momentum is None and not self.keep_momentum and self.loss_fn is None


@dataclass
class Regulariser:
    """Adds mu/2 ||theta - anchor||^2 + <theta, linear> to a job's loss.

    Applied to the gradients directly (g += mu (theta - anchor) + linear), which is the same
    update without differentiating through the terms. Parameters absent from `anchor` or
    `linear` get no term. Buffers (batch-norm statistics) never do.
    """

    mu: float = 0.0
    anchor: Params | None = None
    linear: Params | None = None

    def apply(self, named_params: list[tuple[str, torch.Tensor]]) -> None:
        with torch.no_grad():
            for name, p in named_params:
                if p.grad is None:
                    continue
                if self.mu and self.anchor is not None and name in self.anchor:
                    p.grad.add_(p - self.anchor[name], alpha=self.mu)
                if self.linear is not None and name in self.linear:
                    p.grad.add_(self.linear[name])


@dataclass
class JobResult:
    params: Params
    momentum: Params | None  # None unless the job asked to keep it
    mean_loss: float
    steps: int
    losses: list[float] = field(default_factory=list)  # per-epoch mean loss


def batch_order(
    n: int, batch_size: int, epochs: int, seed: tuple[int, ...], drop_last: bool = False
) -> list[np.ndarray]:
    """Shuffled minibatch indices for `epochs` passes over n samples.

    A trailing batch of one sample joins the previous batch (batch norm cannot train on one sample).
    With `drop_last` each epoch's partial last batch is dropped instead, as PyTorch's
    DataLoader(drop_last=True) does, except that a client with fewer than `batch_size` samples keeps its
    one batch (the loader would train it on nothing). The permutations are the same either way.
    """
    rng = np.random.default_rng(np.random.SeedSequence([0xBA7C, *seed]))  # purpose: batch order
    batches = []
    for _ in range(epochs):
        perm = rng.permutation(n)
        chunks = [perm[i : i + batch_size] for i in range(0, n, batch_size)]
        if drop_last and len(chunks) > 1 and len(chunks[-1]) < batch_size:
            chunks.pop()
        elif len(chunks) > 1 and len(chunks[-1]) == 1:
            last = chunks.pop()
            chunks[-1] = np.concatenate([chunks[-1], last])
        batches += chunks
    return batches


def channels_last(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if x.ndim == 4 else x


def cpu_model(spec) -> nn.Module:
    """The CPU backends' working model: channels-last (2.1x faster than NCHW here) and, where the
    backbone has them, the compiled CPU kernels (models/cpu_kernels); same state_dict as spec.build()."""
    model = spec.build().to(memory_format=torch.channels_last)
    if hasattr(model, "use_cpu_kernels"):
        model.use_cpu_kernels()
    return model


def clone_params(params: Params) -> Params:
    return {k: v.detach().clone() for k, v in params.items()}


class LoopEngine:
    """The reference backend: one job after another, in this process, on one model object per spec."""

    name = "loop"
    worker_cpu_seconds = 0.0  # every job runs in this process: its CPU time is the process's own

    def __init__(self, sgd: SGDConfig = SGDConfig()):
        precision.check_supported(sgd.precision)
        self.sgd = sgd
        self._models: dict = {}
        keep_freed_memory()

    def model(self, spec) -> nn.Module:
        """One working model per ModelSpec, reused across jobs (weights are loaded per job)."""
        if spec not in self._models:
            self._models[spec] = cpu_model(spec)
        return self._models[spec]

    def train(self, spec, jobs: list[Job]) -> list[JobResult]:
        model = self.model(spec)
        return [train_job(model, job, self.sgd) for job in jobs]

    def losses(self, spec, items: list[tuple]) -> list[float]:
        """Mean loss for each (params, x, y, s)."""
        model = self.model(spec)
        return [mean_loss(model, *item) for item in items]

    def close(self) -> None:
        pass


@denormals.with_mode  # subnormals flushed in this thread (engine/denormals.py)
def train_job(model: nn.Module, job: Job, default_sgd: SGDConfig) -> JobResult:
    """Run one job on `model` (weights replaced by the job's): minibatch SGD with momentum."""
    sgd = job.sgd or default_sgd
    model.load_state_dict(job.params)
    model.train()
    named = list(model.named_parameters())
    names, params = [n for n, _ in named], [p for _, p in named]
    # fused: one pass over (param, grad, buffer) per tensor instead of three; 0.24 vs 0.41 ms a step here
    opt = torch.optim.SGD(params, lr=sgd.lr, momentum=sgd.momentum, weight_decay=sgd.weight_decay, fused=True)
    if job.momentum is not None and sgd.momentum > 0:
        for name, p in zip(names, params):
            opt.state[p]["momentum_buffer"] = job.momentum[name].clone()
    x_all = channels_last(job.x)
    batches = batch_order(len(job.y), sgd.batch_size, job.epochs, job.seed, sgd.drop_last)
    arithmetic = precision.autocast(sgd.precision)  # fp32: nothing; bf16: the forward under autocast
    features = frozen_features(model, job, x_all, sgd.batch_size, arithmetic, batches) if batches else None
    losses, epoch_losses, per_epoch = (
        [],
        [],
        max(1, len(batches) // max(1, job.epochs)),
    )  # every epoch has as many batches
    for step, idx in enumerate(batches):
        idx_t = torch.from_numpy(idx)
        xb, yb = x_all[idx_t], job.y[idx_t]
        sb = None if job.s is None else job.s[idx_t]
        with arithmetic:  # the backward follows the forward's dtypes; gradients land in the fp32 parameters
            if features is not None:
                loss = job.loss_fn.head_loss(model, features[idx_t], xb, yb)
            elif job.loss_fn is not None:
                loss = job.loss_fn(model, xb, sb, yb)
            else:
                loss = F.cross_entropy(model(xb, sb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if job.regulariser is not None:
            job.regulariser.apply(named)
        if sgd.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, sgd.max_grad_norm)
        opt.step()
        losses.append(loss.detach())
        if (step + 1) % per_epoch == 0:
            epoch_losses.append(float(torch.stack(losses[-per_epoch:]).mean()))  # host sync once per epoch
    momentum = None
    if job.keep_momentum:
        momentum = {
            name: opt.state[p]["momentum_buffer"].detach().clone()
            if "momentum_buffer" in opt.state[p]
            else torch.zeros_like(p)
            for name, p in zip(names, params)
        }
    mean_loss = float(torch.stack(losses).mean()) if losses else float("nan")
    return JobResult(clone_params(model.state_dict()), momentum, mean_loss, len(losses), epoch_losses)


FEATURE_CACHE_ENV = "FEDCOND_FEATURE_CACHE"  # "0": a frozen body's features are recomputed every step
# (working model, arithmetic, short batch size, full size) whose features differed: only ever sends jobs per step
_ROUNDS_DIFFERENTLY: set[tuple] = set()


def _batch_dependent(model: nn.Module) -> bool:
    """Whether a train-mode forward depends on the rest of the batch or on chance, or moves state:
    batch norm (batch statistics; running statistics updated) and dropout."""
    kinds = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd)
    return any(isinstance(m, kinds) for m in model.modules())


def frozen_features(
    model: nn.Module, job: Job, x_all: torch.Tensor, batch_size: int, arithmetic, batches: list[np.ndarray]
) -> torch.Tensor | None:
    """The body's features of every sample of the job [n, D], computed once, for a loss whose body
    stays frozen for the whole job (`frozen_features`; FedRep's 10 head epochs then cost one pass of
    the body, not ten); None where that would not be the same computation: no such loss, a model whose
    features depend on the batch (batch norm, dropout), FEDCOND_FEATURE_CACHE=0, or, measured rather than
    assumed, a step's features differ from the cache in any bit. Kernels may round a sample differently by
    the size of its batch (the MNIST CNN's kernels do for batches of 1-3 samples), so one batch of each
    size the job trains on is computed as its step will compute it and compared, and the cache is computed in
    full batches only (the tail's features are the last rows of the job's last full batch of samples).
    The global random stream is left as it was."""
    if not getattr(job.loss_fn, "frozen_features", False) or _batch_dependent(model):
        return None
    if os.environ.get(FEATURE_CACHE_ENV, "").strip() == "0":
        return None

    def s_of(idx):
        return None if job.s is None else job.s[idx]

    n = len(job.y)
    size = min(batch_size, n)  # a client smaller than a batch trains on one batch of all its samples
    windows = [(a, a + size, 0) for a in range(0, n - size + 1, size)]  # (start, stop, first row kept)
    if n % size:
        windows.append((n - size, n, size - n % size))
    by_size: dict[int, np.ndarray] = {}
    for b in batches:
        by_size.setdefault(len(b), b)

    # a short batch size found to round differently stays so in this process: go per step at once next time
    def rounding_key(length: int) -> tuple:
        return id(model), type(arithmetic).__name__, length, size

    if any(rounding_key(length) in _ROUNDS_DIFFERENTLY for length in by_size if length < size):
        return None
    direct: dict[int, torch.Tensor] = {}
    with torch.random.fork_rng(devices=[]), torch.no_grad(), arithmetic:
        # a batch shorter than the cache's windows is where rounding may differ: try it inside a full window first,
        # so that a job that falls back pays two small batches, not the whole cache (never slower than ~1 batch)
        for b in (b for b in by_size.values() if len(b) < size):
            idx = torch.from_numpy(b)
            direct[len(b)] = model.features(x_all[idx], s_of(idx))
            full = torch.from_numpy(np.concatenate([b, np.setdiff1d(np.arange(n), b)[: size - len(b)]]))
            if not torch.equal(direct[len(b)], model.features(x_all[full], s_of(full))[: len(b)]):
                _ROUNDS_DIFFERENTLY.add(rounding_key(len(b)))
                return None
        z = torch.cat([model.features(x_all[a:b], s_of(slice(a, b)))[keep:] for a, b, keep in windows])
        for length, b in by_size.items():
            idx = torch.from_numpy(b)
            step = direct[length] if length in direct else model.features(x_all[idx], s_of(idx))
            if not torch.equal(step, z[idx]):
                return None
    return z


@torch.no_grad()
@denormals.with_mode
def mean_loss(
    model: nn.Module, params: Params, x: torch.Tensor, y: torch.Tensor, s: torch.Tensor | None, batch_size: int = 1024
) -> float:
    """Mean cross-entropy of the model with `params` on (x, y[, s]), in eval mode (IFCA's cluster choice)."""
    model.load_state_dict(params)
    model.eval()
    total = 0.0
    for i in range(0, x.shape[0], batch_size):
        sb = None if s is None else s[i : i + batch_size]
        total += float(
            F.cross_entropy(model(channels_last(x[i : i + batch_size]), sb), y[i : i + batch_size], reduction="sum")
        )
    return total / max(1, x.shape[0])


@torch.no_grad()
@denormals.with_mode
def predict(
    model: nn.Module,
    params: Params,
    x: torch.Tensor,
    s: torch.Tensor | None,
    batch_size: int = 1024,
    scores: Callable | None = None,
) -> torch.Tensor:
    """Class predictions [n] of the model with `params` on uint8 images x [n, C, H, W]; `scores`
    maps the outputs to class scores first (JDFL's collapse of its M x C head)."""
    model.load_state_dict(params)
    model.eval()
    out = []
    for i in range(0, x.shape[0], batch_size):
        xb = channels_last(x[i : i + batch_size])
        sb = None if s is None else s[i : i + batch_size]
        logits = model(xb, sb)
        out.append((logits if scores is None else scores(logits)).argmax(dim=1))
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)


def mix(params: list[Params], weights: np.ndarray) -> list[Params]:
    """Many weighted averages of the same models at once: out_m = sum_n W[m, n] params_n / sum_n W[m, n].

    One float64 matrix product per entry ([M, N] @ [N, numel]) instead of M separate averages:
    DAC's 200 neighbourhood averages over 200 clients take one GEMM, not 200 stacks of 100 models.
    Integer buffers (batch counters) take the max over the models with non-zero weight.
    """
    w = np.asarray(weights, dtype=np.float64)
    w = torch.as_tensor(w / w.sum(axis=1, keepdims=True))  # [M, N], rows sum to 1
    out: list[Params] = [{} for _ in range(w.shape[0])]
    for key, ref in params[0].items():
        if ref.is_floating_point():
            stacked = torch.stack([p[key].reshape(-1) for p in params]).to(torch.float64)  # [N, numel]
            mixed = (w @ stacked).to(ref.dtype)  # [M, numel]
            for m in range(w.shape[0]):
                out[m][key] = mixed[m].reshape(ref.shape).clone()
        else:
            stacked = torch.stack([p[key] for p in params])  # [N, ...]
            for m in range(w.shape[0]):
                out[m][key] = stacked[w[m] > 0].max(dim=0).values
    return out


def weighted_average(params: list[Params], weights: np.ndarray) -> Params:
    """sum_i w_i params_i / sum_i w_i for float entries; integer buffers (batch counters) take the max."""
    return mix(params, np.asarray(weights, dtype=np.float64)[None, :])[0]
