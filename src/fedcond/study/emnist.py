"""The EMNIST half of the earlier study (SPEC Part B): digits / uppercase / lowercase clusters.

Data. EMNIST **byclass** (62 classes: labels 0-9 digits, 10-35 'A'-'Z', 36-61 'a'-'z'), not the
sources' "Balanced": Balanced merges c i j k l m o p s u v w x y z into their uppercase classes, so
most confusable pairs below would not exist as separate labels. The task is the 62-way byclass
classification. Load it with `fedcond.data.load("emnist", split="byclass")` (run
`fedcond data download emnist` once).

Federation (`build_federation`). Three clusters by the character's kind: digits, uppercase,
lowercase. Each cluster's training images are shuffled (seeded) and dealt out as disjoint shares
of `samples_per_client` (default 2,500, the sources' "about 2,500 per client") to
`clients_per_cluster` clients (default 10); test images likewise, `test_samples_per_client` each
(default 500). When a cluster has too few images for that (small test files), every client gets an
equal share of what there is (the numbers used are in each result's `extra`).

Conditioning statistic. Each client's first n_c PCA eigenvectors of its raw training pixels
(flattened, scaled to [0, 1], centred), sign-fixed by the convention of
`fedcond.study.statistic` (largest |entry| positive), concatenated and multiplied by sqrt(784)
= 28 so that entries have unit root-mean-square, like the z-scored inputs of SPEC A.2 (a unit
eigenvector has entries of about 1/28). n_c in (1, 2, 3, 4, 8): stat_dim = 784 n_c.

Models. The MNIST CNN of SPEC A.3 (`fedcond.models.mnist_cnn`) with 62 outputs; `conditional`
concatenates the statistic to the flattened conv features (stat_dim = 784 n_c); the references
use the plain backbone: `global` (one model on every client's data), `cluster` (one per true
cluster, oracle), `client` (one per client, its own data only). All trained pooled (SPEC A.4's
paper protocol): SGD lr 0.01, momentum 0.9, batch 64, cross-entropy, `epochs` (default 20).

Metrics. Accuracy per client on its own test share (mean and std over clients, and pooled), per
cluster, and on the confusable groups o/O/0, l/I/1, z/Z/2, s/S/5, k/K, f/F, p/P, c/C: for each
group the accuracy over the test images of its characters, the share of them predicted as
*another member of the group*, and each character's own accuracy.

`run_emnist(data_dir)` runs everything in one call.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..data import load
from ..data.types import ImageData
from ..engine import SGDConfig, batch_order
from ..engine.denormals import with_mode
from ..errors import FedcondError
from ..models import ModelSpec
from .statistic import cluster_ari, leading_eigenvectors
from .synthetic import StudyResult

SPLIT = "byclass"
CLUSTERS = ("digits", "uppercase", "lowercase")
NC_VALUES = (1, 2, 3, 4, 8)
CONFUSABLE_GROUPS = ("o/O/0", "l/I/1", "z/Z/2", "s/S/5", "k/K", "f/F", "p/P", "c/C")
METHODS = ("global", "cluster", "client", "conditional")
PIXELS = 28 * 28


@dataclass(frozen=True)
class EmnistConfig:
    """The federation's size and the training protocol (defaults: the study's)."""

    clients_per_cluster: int = 10
    samples_per_client: int = 2500
    test_samples_per_client: int = 500
    epochs: int = 20
    lr: float = SGDConfig.lr  # the engine's local SGD (SPEC A.4), kept flat so that rows record it as before
    momentum: float = SGDConfig.momentum
    batch_size: int = SGDConfig.batch_size

    @property
    def sgd(self) -> SGDConfig:
        return SGDConfig(lr=self.lr, momentum=self.momentum, batch_size=self.batch_size)

    def as_dict(self) -> dict:
        return asdict(self)


def cluster_of(labels: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
    """0 digits, 1 uppercase, 2 lowercase, from the class names (so it holds for any label order)."""
    kind = np.array([0 if c.isdigit() else 1 if c.isupper() else 2 for c in classes])
    return kind[np.asarray(labels)]


@dataclass(frozen=True, eq=False)
class EmnistFederation:
    """Per-client uint8 images [n, 1, 28, 28] and int64 labels; client i is in cluster[i]."""

    x_train: list[torch.Tensor]
    y_train: list[torch.Tensor]
    x_test: list[torch.Tensor]
    y_test: list[torch.Tensor]
    cluster: np.ndarray  # [N]
    classes: tuple[str, ...]
    train_per_client: int
    test_per_client: int

    @property
    def num_clients(self) -> int:
        return len(self.cluster)


def build_federation(data: ImageData, config: EmnistConfig = EmnistConfig(), seed: int = 0) -> EmnistFederation:
    """Deal each cluster's images out to its clients (see the module docstring)."""
    if len(data.classes) != 62 or data.classes[10] != "A" or data.classes[36] != "a":
        raise FedcondError(
            f"the EMNIST study needs the byclass split (62 classes), got {len(data.classes)} classes; "
            f"load it with split='byclass'"
        )
    rng = np.random.default_rng(np.random.SeedSequence([0xE3, seed]))  # purpose: client shares
    k = config.clients_per_cluster
    parts = {"train": ([], []), "test": ([], [])}
    sizes = {}
    for split, x, y, want in (
        ("train", data.x_train, data.y_train, config.samples_per_client),
        ("test", data.x_test, data.y_test, config.test_samples_per_client),
    ):
        kinds = cluster_of(y, data.classes)
        per = min([want] + [int((kinds == c).sum()) // k for c in range(len(CLUSTERS))])
        if per < 1:
            raise FedcondError(f"EMNIST {split}: too few images for {k} clients per cluster")
        sizes[split] = per
        for c in range(len(CLUSTERS)):
            idx = rng.permutation(np.flatnonzero(kinds == c))[: per * k]
            for share in idx.reshape(k, per):
                parts[split][0].append(torch.from_numpy(x[share]).unsqueeze(1))  # [n, 1, 28, 28] uint8
                parts[split][1].append(torch.from_numpy(y[share]))
    return EmnistFederation(
        x_train=parts["train"][0],
        y_train=parts["train"][1],
        x_test=parts["test"][0],
        y_test=parts["test"][1],
        cluster=np.repeat(np.arange(len(CLUSTERS)), k),
        classes=tuple(data.classes),
        train_per_client=sizes["train"],
        test_per_client=sizes["test"],
    )


def pixel_statistics(fed: EmnistFederation, n_c: int) -> np.ndarray:
    """Each client's first n_c sign-fixed eigenvectors of its training pixels, x sqrt(784): [N, 784 n_c]."""
    rows = [leading_eigenvectors(x.reshape(len(x), -1).numpy() / 255.0, n_c).reshape(-1) for x in fed.x_train]
    return np.stack(rows) * math.sqrt(PIXELS)


# ------------------------------------------------------------------------------------------ training


def _init(spec: ModelSpec, seed: tuple[int, ...]) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(np.random.SeedSequence([0x1417, *seed]).generate_state(1)[0]))  # purpose: init
        return spec.build()


@with_mode
def train_model(
    spec: ModelSpec,
    x: torch.Tensor,
    y: torch.Tensor,
    owner: torch.Tensor,
    stats: torch.Tensor | None,
    config: EmnistConfig,
    seed: tuple[int, ...],
    device: str = "cpu",
) -> torch.nn.Module:
    """Minibatch SGD with momentum over pooled (x [n, 1, 28, 28] uint8, y [n]); sample j's statistic is
    stats[owner[j]] (looked up per batch: the pooled per-sample copy would take 1.9 GB at n_c = 8)."""
    dev = torch.device(device)
    model = _init(spec, seed).to(dev).to(memory_format=torch.channels_last)  # channels-last: 2.1x faster on CPU
    model.train()
    sgd = config.sgd
    opt = torch.optim.SGD(model.parameters(), lr=sgd.lr, momentum=sgd.momentum, weight_decay=sgd.weight_decay)
    x, y, owner = x.to(dev).contiguous(memory_format=torch.channels_last), y.to(dev), owner.to(dev)
    table = None if stats is None else stats.to(dev)
    for idx in batch_order(len(y), sgd.batch_size, config.epochs, seed):
        idx_t = torch.from_numpy(idx).to(dev)
        s = None if table is None else table[owner[idx_t]]  # [B, L]
        loss = F.cross_entropy(model(x[idx_t], s), y[idx_t])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model


@torch.no_grad()
def predict(
    model: torch.nn.Module, x: torch.Tensor, s: torch.Tensor | None, device: str = "cpu", batch_size: int = 1024
) -> torch.Tensor:
    """Class predictions [n] for one client's images x [n, 1, 28, 28] and its statistic s [L] (or None)."""
    model.eval()
    dev = torch.device(device)
    out = []
    for i in range(0, len(x), batch_size):
        xb = x[i : i + batch_size].to(dev).contiguous(memory_format=torch.channels_last)
        sb = None if s is None else s.to(dev).expand(len(xb), -1)  # [B, L]
        out.append(model(xb, sb).argmax(dim=1).cpu())
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)


# ------------------------------------------------------------------------------------------ metrics


def confusable_accuracy(y: np.ndarray, pred: np.ndarray, classes: tuple[str, ...]) -> dict:
    """Per group: accuracy, share predicted as another member of the group, samples, and per character."""
    index = {c: i for i, c in enumerate(classes)}
    out = {}
    for group in CONFUSABLE_GROUPS:
        members = [index[c] for c in group.split("/")]
        mask = np.isin(y, members)
        per_char = {}
        for c, m in zip(group.split("/"), members):
            sel = y == m
            per_char[c] = {"accuracy": float((pred[sel] == m).mean()) if sel.any() else None, "samples": int(sel.sum())}
        n = int(mask.sum())
        confused = np.isin(pred[mask], members) & (pred[mask] != y[mask])
        out[group] = {
            "accuracy": float((pred[mask] == y[mask]).mean()) if n else None,
            "confused_within_group": float(confused.mean()) if n else None,
            "samples": n,
            "per_char": per_char,
        }
    return out


def _score(
    method: str,
    fed: EmnistFederation,
    preds: list[torch.Tensor],
    seconds: float,
    config: EmnistConfig,
    hyper: dict,
    extra: dict,
) -> StudyResult:
    y = [t.numpy() for t in fed.y_test]
    p = [t.numpy() for t in preds]
    per_client = np.array([(a == b).mean() for a, b in zip(p, y)])
    y_all, p_all = np.concatenate(y), np.concatenate(p)
    kinds = cluster_of(y_all, fed.classes)
    per_cluster = {
        name: float((p_all[kinds == c] == y_all[kinds == c]).mean()) if (kinds == c).any() else None
        for c, name in enumerate(CLUSTERS)
    }
    extra = {
        "metric": "accuracy",
        "per_cluster": per_cluster,
        "confusable": confusable_accuracy(y_all, p_all, fed.classes),
        "train_per_client": fed.train_per_client,
        "test_per_client": fed.test_per_client,
        "split": SPLIT,
        **extra,
    }
    return StudyResult(
        method=method,
        metric="accuracy",
        value=float(per_client.mean()),
        spread=float(per_client.std()),
        pooled=float((p_all == y_all).mean()),
        per_client=[float(v) for v in per_client],
        seconds=seconds,
        steps=config.epochs,
        hyperparameters={**config.as_dict(), **hyper},
        extra=extra,
    )


# ------------------------------------------------------------------------------------------ the study


def run_methods(
    fed: EmnistFederation,
    methods: tuple[str, ...] = METHODS,
    nc: tuple[int, ...] = NC_VALUES,
    config: EmnistConfig = EmnistConfig(),
    seed: int = 0,
    device: str = "cpu",
) -> dict[str, StudyResult]:
    """Train and evaluate on a built federation. Keys: 'global', 'cluster', 'client', 'conditional/nc=<n_c>'."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise FedcondError(f"unknown EMNIST study method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    plain = ModelSpec((1, 28, 28), len(fed.classes))
    owner = torch.cat([torch.full((len(y),), i) for i, y in enumerate(fed.y_train)])  # [n] client of each sample
    x_all, y_all = torch.cat(fed.x_train), torch.cat(fed.y_train)
    out: dict[str, StudyResult] = {}

    def groups_run(name: str, groups: list[np.ndarray], code: int) -> None:
        # one plain model per group of clients (global: 1 group, cluster: K, client: N)
        start = time.perf_counter()
        preds: list[torch.Tensor | None] = [None] * fed.num_clients
        for g, members in enumerate(groups):
            sel = torch.from_numpy(np.isin(owner.numpy(), members))
            model = train_model(plain, x_all[sel], y_all[sel], owner[sel], None, config, (seed, code, g), device)
            for i in members:
                preds[i] = predict(model, fed.x_test[i], None, device)
        out[name] = _score(name, fed, preds, time.perf_counter() - start, config, {}, {})

    if "global" in methods:
        groups_run("global", [np.arange(fed.num_clients)], 1)
    if "cluster" in methods:
        groups_run("cluster", [np.flatnonzero(fed.cluster == c) for c in range(len(CLUSTERS))], 2)
    if "client" in methods:
        groups_run("client", [np.array([i]) for i in range(fed.num_clients)], 3)
    if "conditional" in methods and nc:
        eig = pixel_statistics(fed, max(nc))  # [N, 784 max(nc)]: the first n_c are a prefix
        for n_c in nc:
            start = time.perf_counter()
            stats = torch.from_numpy(eig[:, : PIXELS * n_c]).to(torch.float32)  # [N, 784 n_c]
            spec = ModelSpec((1, 28, 28), len(fed.classes), stat_dim=PIXELS * n_c)
            model = train_model(spec, x_all, y_all, owner, stats, config, (seed, 4, n_c), device)
            preds = [predict(model, fed.x_test[i], stats[i], device) for i in range(fed.num_clients)]
            ari = cluster_ari(eig[:, : PIXELS * n_c], fed.cluster, seed)
            out[f"conditional/nc={n_c}"] = _score(
                "conditional",
                fed,
                preds,
                time.perf_counter() - start,
                config,
                {"n_c": n_c, "stat_dim": PIXELS * n_c, "stat_scale": "sqrt(784)"},
                {"statistic_ari": ari},
            )
    return out


def run_emnist(
    data_dir=None,
    nc: tuple[int, ...] = NC_VALUES,
    methods: tuple[str, ...] = METHODS,
    seed: int = 0,
    config: EmnistConfig = EmnistConfig(),
    device: str = "cpu",
    data: ImageData | None = None,
) -> dict[str, StudyResult]:
    """The whole EMNIST study in one call: load byclass from `data_dir` (see `fedcond.data.resolve_data_dir`),
    build the three-cluster federation, train the references and one conditional CNN per n_c."""
    data = data if data is not None else load("emnist", data_dir, split=SPLIT)
    fed = build_federation(data, config, seed)
    return run_methods(fed, tuple(methods), tuple(nc), config, seed, device)


def format_results(results: dict[str, StudyResult]) -> str:
    """Overall accuracy and the confusable groups' accuracies, one row per method."""
    groups = list(CONFUSABLE_GROUPS)
    head = f"{'method':<18} {'acc':>6} {'+-':>6} " + " ".join(f"{g:>7}" for g in groups)
    lines = [head, "-" * len(head)]
    for key, r in results.items():
        conf = r.extra["confusable"]
        cells = " ".join(
            f"{conf[g]['accuracy']:>7.3f}" if conf[g]["accuracy"] is not None else f"{'-':>7}" for g in groups
        )
        lines.append(f"{key:<18} {r.value:>6.3f} {r.spread:>6.3f} {cells}")
    return "\n".join(lines)


def main(
    data_dir=None, device: str = "cpu", seed: int = 0, config: EmnistConfig = EmnistConfig()
) -> dict[str, StudyResult]:
    """Run the whole EMNIST study and print its table (a GPU is advised: 8 CNNs x 20 epochs x 75,000 images)."""
    start = time.perf_counter()
    res = run_emnist(data_dir, seed=seed, config=config, device=device)
    print(format_results(res))
    print(f"\n{time.perf_counter() - start:.0f} s on {device}")
    return res
