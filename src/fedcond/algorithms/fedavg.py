"""FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from Decentralized
Data", AISTATS 2017) and its conditioned twin.

Round r: every client starts from the global weights w_r, runs `local_epochs` of SGD on its own
data (fresh momentum: clients keep no optimiser state; with `carry_momentum=True` each client keeps
its own SGD momentum buffer from round to round, as one optimiser per client kept for the whole run
would: a reading probed for FedAvg's slow start at sparse settings, issue 40), and the server sets
w_{r+1} = sum_i n_i w_i / sum_i n_i; with a server optimiser (server_opt.py: FedAvgM, FedAdam) the
server instead steps along that average's difference from w_r.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..engine import SGDConfig
from ..errors import FedcondError
from ..models import CONDITIONINGS
from .base import Algorithm, Context, State, aggregate, carried_momentum, receive, send
from .server_opt import ServerOptimiser


@dataclass(frozen=True)
class FedAvg(ServerOptimiser, Algorithm):
    conditioned: ClassVar[bool] = False
    needs_truth: ClassVar[bool] = False
    federated: ClassVar[bool] = True
    counts_traffic: ClassVar[bool] = True
    # each client's SGD momentum lives across rounds (a reading, issue 40); False: fresh every round.
    # State.momentum holds one buffer per client (over Flower they travel with each job, as Gossip's do)
    carry_momentum: bool = False
    # local epochs per round, the rounds staying the protocol's; None: the protocol's (`--local-epochs`)
    local_epochs: int | None = None
    # the clients' minibatch size; None: the protocol's (`--batch-size`). Smaller: more local steps a round
    # for the same samples trained (a lever for clients with few samples, issue 45)
    local_batch_size: int | None = None
    # at least this many local steps an epoch: a client whose data would give fewer at the batch above takes the
    # largest batch that gives this many (n // min_local_steps), but never one below `min_batch_size`; a client with
    # more data keeps that batch, so its run is unchanged. None: every client takes the batch above. The steps a
    # round stay bounded by the data, where a fixed small batch multiplies them on large clients too (issue 45)
    min_local_steps: int | None = None
    # the floor of the batch `min_local_steps` may shrink to: 16, the smallest batch probed (stop 68); below it a
    # batch-norm layer (the CIFAR CNN) would normalise over a handful of samples, and a 50-sample client would take
    # 18 single-digit batches an epoch. A protocol batch below it is kept (the option never enlarges a batch)
    min_batch_size: int = 16

    def __post_init__(self):
        super().__post_init__()
        if self.local_epochs is not None and self.local_epochs < 1:
            raise FedcondError(f"local_epochs must be >= 1, got {self.local_epochs}")
        if self.local_batch_size is not None and self.local_batch_size < 1:
            raise FedcondError(f"local_batch_size must be >= 1, got {self.local_batch_size}")
        if self.min_local_steps is not None and self.min_local_steps < 1:
            raise FedcondError(f"min_local_steps must be >= 1, got {self.min_local_steps}")
        if self.min_batch_size < 1:
            raise FedcondError(f"min_batch_size must be >= 1, got {self.min_batch_size}")

    def plain_jobs(self) -> bool:
        return not self.carry_momentum  # carried buffers are optimiser state DP-SGD's fresh optimiser cannot take

    def init(self, ctx: Context) -> State:
        n = ctx.federation.num_clients
        momentum = (None,) * n if self.carry_momentum else ()
        return State(models=(ctx.init_params(self.conditioned),), assignment=(0,) * n, momentum=momentum)

    def round(self, ctx: Context, state: State, r: int) -> State:
        n = ctx.federation.num_clients
        epochs = self.epochs_per_round(ctx)
        jobs = [
            ctx.job(
                state.models[0],
                (i,),
                self.conditioned,
                seed=(r, i),
                epochs=epochs,
                sgd=self.local_sgd(ctx, i),
                **({"momentum": state.momentum[i], "keep_momentum": True} if self.carry_momentum else {}),
            )
            for i in range(n)
        ]
        send(ctx, range(n), state.models[0])
        if self.carry_momentum:  # a client keeps no state between rounds: its buffers travel with its job
            send(ctx, range(n), lambda i: state.momentum[i])
        results = ctx.engine.train(ctx.spec(self.conditioned), jobs)
        receive(ctx, range(n), results)  # the buffers come back with the weights
        replies = aggregate(ctx, range(n), results)
        w, slots = self.server_step(state.models[0], replies.average(), state.extra.get("server"))
        extra = {} if slots is None else {"server": slots}
        momentum = carried_momentum(state.momentum, results) if self.carry_momentum else ()
        return State(
            models=(w,),
            assignment=state.assignment,
            momentum=momentum,
            round=r + 1,
            train_loss=replies.loss,
            extra=extra,
        )

    def local_sgd(self, ctx: Context, client: int) -> SGDConfig | None:
        """Client `client`'s optimiser where `local_batch_size` or `min_local_steps` changes it; None: the
        engine's (the protocol's)."""
        batch = ctx.sgd.batch_size if self.local_batch_size is None else self.local_batch_size
        batch = self.client_batch(batch, ctx.federation.clients[client].n_train)
        return None if batch == ctx.sgd.batch_size else replace(ctx.sgd, batch_size=batch)

    def client_batch(self, batch: int, n: int) -> int:
        """The batch a client with n samples trains at, `batch` being the protocol's or `local_batch_size`:
        `min_local_steps` shrinks it for small clients, never below `min_batch_size`, never above `batch`."""
        if self.min_local_steps is None:
            return batch
        # floor, not ceil: n // (n // m) >= m steps an epoch (batch_order merges only a one-sample tail), where a
        # batch of ceil(n / m) may give m - 1
        return min(batch, max(self.min_batch_size, n // self.min_local_steps))

    def epochs_per_round(self, ctx: Context) -> int:
        """Local epochs of a round: `local_epochs`, or the protocol's (`--local-epochs`) where it is None."""
        return ctx.local_epochs if self.local_epochs is None else self.local_epochs


@dataclass(frozen=True)
class ConditionalFedAvg(FedAvg):
    """Client-conditional FL deployed with FedAvg rounds: each client trains with its own fixed s_i
    as an input; only the shared weights travel (the statistics never leave the client)."""

    conditioned: ClassVar[bool] = True
    # The defaults make it train where clients are many and small (issue 45's probe, docs/choices.md
    # "Server optimisers"): server momentum, FiLM, 5 local epochs a round and at least 18 local steps an epoch,
    # in the protocol's rounds.
    server_opt: str = "momentum"
    # beta 0.5, not FedAvgM's 0.9: at rich a round's ~470 local steps point one way, and 0.9 added them up
    # until the weights overflowed (E1 FMNIST rich, stop 59); 0.5 trains there and keeps super sparse
    server_momentum: float = 0.5
    # how the model takes s (models/cnn.py): concat | film; None: the protocol's (`--conditioning`), so the
    # deployable method takes FiLM while the paper's pooled Conditional in the same cell keeps concat
    conditioning: str | None = "film"
    local_epochs: int | None = 5  # FedAvg's field, five a round here
    # at least 18 local steps an epoch (FedAvg's field; batch 16 at the least): where clients are many and small
    # (300 samples at super sparse, ~5 steps an epoch at batch 64) they train at batch 16, the batch probed there
    # (stop 68: E1 FMNIST K=2 super sparse .886 -> .903); a client with 1,152 samples or more keeps the protocol's
    # batch, so rich cells run as before, where a fixed batch 16 diverged (docs/choices.md "Server optimisers")
    min_local_steps: int | None = 18

    def __post_init__(self):
        super().__post_init__()
        if self.conditioning is not None and self.conditioning not in CONDITIONINGS:
            raise FedcondError(f"conditioning must be {' or '.join(CONDITIONINGS)}, got {self.conditioning!r}")

    def init(self, ctx: Context) -> State:
        # the secure sum of the statistics (flower/secure_sum.py): each client sends its statistic
        # (masked, the same size) and receives the population's mean and spread
        if ctx.stats is not None and ctx.traffic is not None:
            for i in range(ctx.federation.num_clients):
                ctx.traffic.receive(i, ctx.stats[i])
                ctx.traffic.send(i, (ctx.stats[i], ctx.stats[i]))
        return super().init(ctx)
