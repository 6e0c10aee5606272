"""Ditto (Li, Hu, Beirami and Smith, "Ditto: Fair and Robust Federated Learning Through
Personalization", ICML 2021), as SPEC A.5 fixes it.

Each client i keeps a personal model v_i next to the FedAvg global model w; v_i = w_0 at the
start. Round r, with w_r the global model every client receives:
  1. personal update: from v_i, `personal_epochs(r)` epochs of plain SGD (momentum 0, the
     engine's lr and batch size) on  f_i(v) + lam/2 ||v - w_r||^2 ;  the anchor is the received
     w_r, not the global model being trained in step 2;
  2. global update: FedAvg's local step, `local_epochs` of the engine's SGD from w_r, with the
     same batch seeds as FedAvg; then w_{r+1} = sum_i n_i w_i / sum_i n_i.
Both updates start from what the client held at the start of the round, so their order does not
matter (Ditto's Algorithm 1 runs the global step first). Client i predicts with v_i.

"5 personal epochs" (SPEC A.5): the sources do not say whether per round or in total. Our
reading, the default, is per round (`total_over_rounds=None`): every round runs `personal_epochs`
epochs, as Ditto's Algorithm 1 runs its s local steps on v_k in every round a client takes part
in. `total_over_rounds=R` gives the other reading: `personal_epochs` epochs in total, spread as
evenly as integer epochs allow over the run's R rounds (round r runs
floor((r+1)E/R) - floor(rE/R) epochs, so E=5, R=20 runs one epoch in rounds 3, 7, 11, 15, 19);
a round with none leaves v_i unchanged.

Where the personal update starts (`personal_start`): "own" (the default) continues from v_i, the
model the client keeps (Ditto's Algorithm 1; SPEC: "each client keeps a personal model"); "global"
restarts it from the received w_r every round, so v_i is w_r fine-tuned for the round's personal
epochs under the proximal term: a reading some implementations take, probed for the published
super-sparse values (issue 40), where a few steps of fine-tuning cannot take v_i far from w_r.

"Plain SGD (no momentum)" (the paper's Appendix K-B) is read as the personal update's optimiser;
the global track is FedAvg's local step with the protocol's optimiser (SGD momentum 0.9 under the
paper protocol). `global_momentum=0` gives the other reading (both tracks plain SGD).

The weaker "FedAvg, then fine-tune" variant is not this baseline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ..engine import Regulariser
from ..errors import FedcondError
from .base import Algorithm, Context, State, aggregate, receive, send

PERSONAL = 0xD177  # names the personal update's batch-order streams (the global track uses FedAvg's)


@dataclass(frozen=True)
class Ditto(Algorithm):
    lam: float = 1.0  # lambda, the proximal weight toward the received global model
    personal_epochs: int = 5  # per round (default), or in total with total_over_rounds
    total_over_rounds: int | None = None  # None: personal_epochs every round; R: personal_epochs spread over R rounds
    global_momentum: float | None = None  # the global track's SGD momentum; None: the protocol's (0.9 under paper)
    personal_start: str = "own"  # the personal update starts from v_i ("own", Algorithm 1) or from w_r ("global")

    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True
    counts_traffic: ClassVar[bool] = True

    def __post_init__(self):
        if self.lam < 0 or self.personal_epochs < 0:
            raise FedcondError(f"Ditto needs lam >= 0 and personal_epochs >= 0, got {self.lam}, {self.personal_epochs}")
        if self.global_momentum is not None and not 0 <= self.global_momentum < 1:
            raise FedcondError(f"Ditto's global_momentum must be None or in [0, 1), got {self.global_momentum}")
        if self.total_over_rounds is not None and self.total_over_rounds < 1:
            raise FedcondError(f"total_over_rounds must be None or >= 1, got {self.total_over_rounds}")
        if self.personal_start not in ("own", "global"):
            raise FedcondError(f"Ditto's personal_start must be own or global, got {self.personal_start!r}")

    def epochs_in_round(self, r: int) -> int:
        if self.total_over_rounds is None:
            return self.personal_epochs
        if r >= self.total_over_rounds:
            return 0
        e, big_r = self.personal_epochs, self.total_over_rounds
        return (r + 1) * e // big_r - r * e // big_r

    def init(self, ctx: Context) -> State:
        n = ctx.federation.num_clients
        w0 = ctx.init_params(self.conditioned)
        # models[0] is the global model; models[1 + i] is client i's personal model
        return State(models=(w0,) * (n + 1), assignment=tuple(range(1, n + 1)))

    def round(self, ctx: Context, state: State, r: int) -> State:
        n = ctx.federation.num_clients
        w = state.models[0]
        own = (
            {} if self.global_momentum is None else {"sgd": dataclasses.replace(ctx.sgd, momentum=self.global_momentum)}
        )
        global_jobs = [ctx.job(w, (i,), self.conditioned, seed=(r, i), **own) for i in range(n)]
        epochs = self.epochs_in_round(r)
        plain_sgd = dataclasses.replace(ctx.sgd, momentum=0.0)
        personal_jobs = (
            [
                ctx.job(
                    state.models[1 + i] if self.personal_start == "own" else w,
                    (i,),
                    self.conditioned,
                    seed=(r, i, PERSONAL),
                    epochs=epochs,
                    sgd=plain_sgd,
                    regulariser=Regulariser(mu=self.lam, anchor=w),
                )
                for i in range(n)
            ]
            if epochs > 0
            else []
        )
        send(ctx, range(n), w)  # the personal models never leave the clients
        results = ctx.engine.train(ctx.spec(self.conditioned), global_jobs + personal_jobs)
        global_res, personal_res = results[:n], results[n:]
        receive(ctx, range(n), global_res)
        global_track = aggregate(
            ctx, range(n), global_res
        )  # a client that dropped out (Flower) keeps its v_i, adds nothing to w
        new_w, global_loss = global_track.average(), global_track.loss
        if personal_res:
            personal = tuple(state.models[1 + i] if res is None else res.params for i, res in enumerate(personal_res))
            loss = aggregate(ctx, range(n), personal_res).loss  # task loss, no lam term
        else:  # no personal epochs this round: v_i unchanged, report the global track's loss
            personal, loss = state.models[1:], global_loss
        return State(
            models=(new_w, *personal),
            assignment=state.assignment,
            round=r + 1,
            train_loss=loss,
            metrics={"global_train_loss": global_loss},
        )
