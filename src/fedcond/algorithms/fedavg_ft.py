"""FedAvg + local fine-tuning ("FedAvg-FT"), the simple baseline personalisation papers must beat
(Wang et al., "Federated Evaluation of On-Device Personalization", 2019; FedRep's public code runs
it as its FedAvg baseline's last step).

Rounds r = 0..R-1 are FedAvg (fedavg.py), bit for bit:
  every client starts from w_r, runs `local_epochs` of SGD on its data, w_{r+1} = sum_i n_i w_i / sum_i n_i.
After the last round, client i fine-tunes the final global model on its own training data:
  v_i = w_R, then `finetune_epochs` epochs of the protocol's SGD on f_i(v) (fresh momentum, a batch
  stream of its own), and predicts with v_i.
A newcomer (held out of training) does the same: v = w_R fine-tuned for `finetune_epochs` epochs on
its own training data. finetune_epochs = 0 is FedAvg.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


from ..engine import Job, Params
from ..errors import FedcondError
from .base import Algorithm, Context, State, aggregate
from .fedavg import FedAvg

FINETUNE = 0xF17E  # names the fine-tuning batch-order streams (training clients and newcomers)


@dataclass(frozen=True)
class FedAvgFT(Algorithm):
    finetune_epochs: int = 10  # FedRep's code fine-tunes its FedAvg baseline for 10 local epochs (docs/choices.md)

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True
    counts_traffic: ClassVar[bool] = True

    def __post_init__(self):
        if self.finetune_epochs < 0:
            raise FedcondError(f"FedAvg-FT needs finetune_epochs >= 0, got {self.finetune_epochs}")

    def plain_jobs(self) -> bool:
        return True

    def init(self, ctx: Context) -> State:
        return FedAvg().init(ctx)

    def round(self, ctx: Context, state: State, r: int) -> State:
        new = FedAvg().round(ctx, state, r)
        if r + 1 < ctx.rounds or self.finetune_epochs == 0:
            return new
        w = new.models[0]
        n = ctx.federation.num_clients
        jobs = [
            ctx.job(w, (i,), self.conditioned, seed=(r, i, FINETUNE), epochs=self.finetune_epochs) for i in range(n)
        ]
        results = ctx.engine.train(ctx.spec(self.conditioned), jobs)
        personal = tuple(w if res is None else res.params for res in results)  # a dropped-out client keeps w
        ft_loss = aggregate(ctx, tuple(range(n)), results).loss
        # models[0] is the global model; models[1 + i] is client i's fine-tuned one
        return State(
            models=(w, *personal),
            assignment=tuple(range(1, n + 1)),
            round=new.round,
            train_loss=new.train_loss,
            metrics={"finetune_train_loss": ft_loss},
        )

    def serve_newcomer(self, ctx: Context, state: State, client, client_id: int) -> Params:
        """The final global model fine-tuned on the newcomer's own training data, as every client did."""
        w = state.models[0]
        if self.finetune_epochs == 0:
            return w
        job = Job(
            params=w,
            x=client.x_train,
            y=client.y_train,
            s=None,
            epochs=self.finetune_epochs,
            seed=(ctx.seed, FINETUNE, client_id),
        )
        return ctx.engine.train(ctx.spec(self.conditioned), [job])[0].params
