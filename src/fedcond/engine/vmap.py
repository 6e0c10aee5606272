"""The accelerator path: many client models trained in lock-step as stacked parameters.

Write the step for one model, `torch.func.vmap` it over the clients (functional_call + grad),
as in PyTorch's model-ensembling recipe. Batch orders come from the same `batch_order` as the
loop backend; clients whose data differ in size get padded batches with a mask (the loss is the
mean over real samples only) and stop updating once their own steps are done, so every client
follows exactly the loop backend's SGD trajectory, up to float summation order (a test checks it).

Measured on the 2-core CPUs: vmap over 50 clients was 0.27x a plain loop, so on a CPU the pool
engine is the default; this backend is for GPUs (`make_engine(..., device="cuda")`).
Supported: cross-entropy jobs with optional Regulariser, models without batch-norm buffers;
any other job is trained by the loop backend on the same device, so results stay correct.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from . import precision
from .local_sgd import Job, JobResult, LoopEngine, SGDConfig, batch_order, clone_params


def _supported(job: Job, buffers: dict, sgd: SGDConfig) -> bool:
    """What the stacked update implements; other jobs (own losses, batch norm, gradient clipping) run in the loop."""
    return job.loss_fn is None and not buffers and (job.sgd or sgd).max_grad_norm is None


class VmapEngine:
    """Same interface as LoopEngine; `chunk` clients per vectorised group bounds device memory."""

    name = "vmap"
    worker_cpu_seconds = 0.0  # in this process; time on an accelerator is not CPU time and is not counted

    def __init__(self, sgd: SGDConfig = SGDConfig(), device: str = "cpu", chunk: int = 256):
        precision.check_supported(sgd.precision, torch.device(device).type)  # bf16: the CPU engines only
        self.sgd, self.device, self.chunk = sgd, torch.device(device), chunk
        self._loop = LoopEngine(sgd)
        self._models: dict = {}
        self._resident: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (host tensor, device copy)

    def _on_device(self, t: torch.Tensor) -> torch.Tensor:
        """Client data is copied to the device once and reused every round (keyed by the host tensor)."""
        if t.device == self.device:
            return t
        hit = self._resident.get(id(t))
        if hit is None or hit[0] is not t:
            hit = self._resident[id(t)] = (t, t.to(self.device))  # holding t keeps its id from being reused
        return hit[1]

    def _model(self, spec):
        if spec not in self._models:
            self._models[spec] = spec.build().to(self.device)
        return self._models[spec]

    def train(self, spec, jobs: list[Job]) -> list[JobResult]:
        model = self._model(spec)
        buffers = {k: v for k, v in model.named_buffers() if k in model.state_dict()}
        out: list[JobResult | None] = [None] * len(jobs)
        groups: dict[tuple, list[int]] = {}
        for i, job in enumerate(jobs):
            if _supported(job, buffers, self.sgd):
                sgd = job.sgd or self.sgd
                key = (sgd, job.s is not None, job.regulariser is not None, job.momentum is not None)
                groups.setdefault(key, []).append(i)
            else:
                out[i] = self._loop.train(spec, [job])[0]
        for key, idx in groups.items():
            for start in range(0, len(idx), self.chunk):
                part = idx[start : start + self.chunk]
                for i, res in zip(part, self._train_group(model, [jobs[i] for i in part], key[0])):
                    out[i] = res
        return out  # type: ignore[return-value]

    def losses(self, spec, items: list[tuple]) -> list[float]:
        return self._loop.losses(spec, items)

    def close(self) -> None:
        pass

    def _train_group(self, model, jobs: list[Job], sgd: SGDConfig) -> list[JobResult]:
        dev = self.device
        names = [n for n, _ in model.named_parameters()]
        stack = lambda dicts: {n: torch.stack([d[n] for d in dicts]).to(dev) for n in names}  # noqa: E731  [K, ...]
        params = stack([j.params for j in jobs])
        bufs = (
            stack([j.momentum for j in jobs])
            if jobs[0].momentum is not None
            else {n: torch.zeros_like(p) for n, p in params.items()}
        )
        reg = [j.regulariser for j in jobs]
        anchor = stack([r.anchor for r in reg]) if reg[0] is not None and reg[0].anchor is not None else None
        linear = stack([r.linear for r in reg]) if reg[0] is not None and reg[0].linear is not None else None
        mu = torch.tensor([r.mu if r is not None else 0.0 for r in reg], device=dev)  # [K]

        orders = [batch_order(len(j.y), sgd.batch_size, j.epochs, j.seed, sgd.drop_last) for j in jobs]
        steps = [len(o) for o in orders]
        width = max((len(b) for o in orders for b in o), default=1)  # padded batch size B
        xs = [self._on_device(j.x) for j in jobs]
        ys = [self._on_device(j.y) for j in jobs]
        ss = [self._on_device(j.s) for j in jobs] if jobs[0].s is not None else None

        def loss_one(p, x, s, y, mask):  # one client's masked mean cross-entropy
            logits = functional_call(model, p, (x, s))
            ce = F.cross_entropy(logits, y, reduction="none")  # [B]
            return (ce * mask).sum() / mask.sum().clamp_min(1)

        grad_all = vmap(grad(loss_one), in_dims=(0, 0, 0 if ss else None, 0, 0))
        loss_all = vmap(loss_one, in_dims=(0, 0, 0 if ss else None, 0, 0))
        model.train()
        losses = [[] for _ in jobs]
        for t in range(max(steps, default=0)):
            active = torch.tensor([t < n for n in steps], device=dev)  # [K]
            idx = np.zeros((len(jobs), width), dtype=np.int64)
            mask = np.zeros((len(jobs), width), dtype=np.float32)
            for k, o in enumerate(orders):
                if t < steps[k]:
                    b = o[t]
                    idx[k, : len(b)], mask[k, : len(b)] = b, 1.0
            idx_t = torch.from_numpy(idx).to(dev)
            xb = torch.stack([x[i] for x, i in zip(xs, idx_t)])  # [K, B, C, H, W]
            yb = torch.stack([y[i] for y, i in zip(ys, idx_t)])  # [K, B]
            sb = torch.stack([s[i] for s, i in zip(ss, idx_t)]) if ss else None  # [K, B, L]
            mb = torch.from_numpy(mask).to(dev)  # [K, B]
            with torch.no_grad():
                batch_loss = loss_all(params, xb, sb, yb, mb)  # [K]
            g = grad_all(params, xb, sb, yb, mb)
            for n in names:
                shape = (-1, *([1] * (params[n].ndim - 1)))  # broadcast a per-client scalar over a parameter
                a = active.view(shape).to(params[n].dtype)  # [K, 1, ...]: 0 once a client's steps are done
                gn = g[n]
                if anchor is not None:  # the Regulariser's terms, as the loop backend adds them
                    gn = gn + mu.view(shape) * (params[n] - anchor[n])
                if linear is not None:
                    gn = gn + linear[n]
                if sgd.weight_decay:
                    gn = gn + sgd.weight_decay * params[n]
                if sgd.momentum:
                    new_buf = sgd.momentum * bufs[n] + gn
                    bufs[n] = torch.where(a.bool(), new_buf, bufs[n])
                    step = new_buf
                else:
                    step = gn
                params[n] = params[n] - sgd.lr * a * step
            for k in range(len(jobs)):
                if t < steps[k]:
                    losses[k].append(batch_loss[k])
        results = []
        for k, job in enumerate(jobs):
            state = clone_params(job.params)
            for n in names:
                state[n] = params[n][k].detach().to(job.params[n].device).clone()
            per_epoch = max(1, steps[k] // max(1, job.epochs))
            ls = torch.stack(losses[k]).cpu() if losses[k] else torch.zeros(0)
            epoch_losses = [float(ls[e * per_epoch : (e + 1) * per_epoch].mean()) for e in range(job.epochs) if len(ls)]
            momentum = {n: bufs[n][k].detach().cpu().clone() for n in names} if job.keep_momentum else None
            results.append(
                JobResult(state, momentum, float(ls.mean()) if len(ls) else float("nan"), steps[k], epoch_losses)
            )
        return results
