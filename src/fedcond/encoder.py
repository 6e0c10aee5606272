"""The frozen, "cross-trained" encoder that gives phi for CIFAR data (SPEC A.2).

A small ResNet (``fedcond.models.encoder``) is trained as a classifier on a *source* dataset
that is not the task's own, then frozen and shipped to every client; only its 128-d embeddings
feed the client statistics (``fedcond.stats``), never the federated model's training.

Sources (``SOURCES``):
- ``cifar100``: the paper's encoder for CIFAR-10 tasks (trained on CIFAR-100's 100 fine labels);
- ``cifar10``: the paper's encoder for CIFAR-100 tasks;
- ``pacs32``: PACS (all four domains, seven classes) resized from 112x112 to 32x32 with
  antialiased bilinear interpolation, split 90/10 by a fixed seed (stratified by class and
  domain). It is the documented stand-in for encoding CIFAR-10 where CIFAR-100 is not
  available (as on the machines this project is developed on): its photos, paintings, cartoons
  and sketches share no images with CIFAR-10, so the encoder stays "cross-trained".

Training follows the SPEC: Adam lr 1e-3, batch 128, cross-entropy, 50 epochs, no augmentation;
it is deterministic given the seed (one torch thread, seeded init and shuffling). The weights go
to ``<out_dir>/encoders/encoder-<source>.pt`` with a JSON sidecar ``encoder-<source>.json``
(source, epochs, seed, test accuracy, sha256 of the .pt file, ...). Both are written to a
temporary file and renamed, so an interrupted run never leaves a half-written file; the .pt is
renamed first, so a crash between the two renames leaves a checksum mismatch that
``load_encoder`` refuses, never a silently wrong encoder.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .data.container import sha256_file  # noqa: F401  (re-exported: the encoder API names it)
from .engine.denormals import with_mode
from .errors import ChecksumMismatch, FedcondError
from .models.encoder import EMBED_DIM, CrossEncoder

SOURCES: tuple[str, ...] = ("cifar100", "cifar10", "pacs32")
ENCODER_SUBDIR = "encoders"
PACS32_SPLIT_SEED = 0  # pacs32's own 90/10 split; fixed, so test accuracies compare across training seeds
PACS32_TEST_FRACTION = 0.1
_FORMAT = 1  # version of the .pt payload
_DEFAULT_SOURCE = {"cifar10": "cifar100", "cifar100": "cifar10"}


# ---------------------------------------------------------------------------------------------
# names and paths


def check_source(source: str) -> str:
    """The canonical source name; FedcondError for an unknown one."""
    key = str(source).strip().lower().replace("-", "_")
    if key not in SOURCES:
        raise FedcondError(f"unknown encoder source {source!r}; valid sources: {', '.join(SOURCES)}")
    return key


def default_source(task_dataset: str) -> str:
    """The paper's cross-training partner: cifar10 -> cifar100, cifar100 -> cifar10.

    (Where CIFAR-100 is not available, pass ``pacs32`` explicitly for CIFAR-10 tasks.)
    """
    key = str(task_dataset).strip().lower().replace("-", "_")
    if key not in _DEFAULT_SOURCE:
        raise FedcondError(
            f"no cross-trained encoder for dataset {task_dataset!r}: the encoder is for cifar10 and "
            f"cifar100 (28x28 datasets use raw pixels)"
        )
    return _DEFAULT_SOURCE[key]


def encoder_dir(data_dir: str | Path | None = None) -> Path:
    """``<data directory>/encoders`` (the data directory as chosen by ``resolve_data_dir``)."""
    from .data import resolve_data_dir

    return resolve_data_dir(data_dir) / ENCODER_SUBDIR


def encoder_path(source: str, data_dir: str | Path | None = None) -> Path:
    """Where the weights of the encoder trained on ``source`` live."""
    return encoder_dir(data_dir) / f"encoder-{check_source(source)}.pt"


def sidecar_path(weights: Path) -> Path:
    return weights.with_suffix(".json")


def train_command(source: str, data_dir: str | Path | None = None) -> str:
    """The command line that makes the encoder ``load_encoder(source, data_dir)`` looks for."""
    cmd = f"fedcond encoder train --source {source}"
    if data_dir is not None and str(data_dir) != "":
        cmd += f" --data-dir {data_dir}"
    return cmd


# ---------------------------------------------------------------------------------------------
# source data


def resize_images(x: np.ndarray, size: int = 32, chunk: int = 512) -> np.ndarray:
    """uint8 [N, H, W, 3] -> uint8 [N, size, size, 3], antialiased bilinear, rounded."""
    out = np.empty((len(x), size, size, 3), dtype=np.uint8)
    for i in range(0, len(x), chunk):
        t = torch.from_numpy(x[i : i + chunk]).permute(0, 3, 1, 2).float()  # [b, 3, H, W]
        r = F.interpolate(
            t, size=(size, size), mode="bilinear", antialias=True, align_corners=False
        )  # [b, 3, size, size]
        out[i : i + chunk] = r.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return out


def pacs32(data_dir: str | Path | None = None):
    """PACS, all domains, resized to 32x32 and split 90/10 (fixed seed, stratified by class x domain)."""
    from sklearn.model_selection import train_test_split

    from .data import ImageData, load

    pacs = load("pacs", data_dir=data_dir)
    x = resize_images(pacs.x)
    strata = pacs.y * len(pacs.domains) + pacs.domain
    idx_train, idx_test = train_test_split(
        np.arange(len(x)), test_size=PACS32_TEST_FRACTION, random_state=PACS32_SPLIT_SEED, stratify=strata
    )
    idx_train, idx_test = np.sort(idx_train), np.sort(idx_test)
    return ImageData(
        name="pacs32",
        x_train=x[idx_train],
        y_train=pacs.y[idx_train],
        x_test=x[idx_test],
        y_test=pacs.y[idx_test],
        classes=pacs.classes,
    )


def source_data(source: str, data_dir: str | Path | None = None):
    """The training data of an encoder source as an ImageData of 32x32 RGB images."""
    from .data import load

    source = check_source(source)
    if source == "pacs32":
        return pacs32(data_dir)
    return load(source, data_dir=data_dir)


def _as_nchw(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 [N, 32, 32, 3] (the loaders' layout) -> uint8 [N, 3, 32, 32]."""
    t = torch.as_tensor(np.asarray(x))
    if t.dtype != torch.uint8 or t.ndim != 4 or tuple(t.shape[1:]) != (32, 32, 3):
        raise FedcondError(f"encoder data must be uint8 RGB images [N, 32, 32, 3], got {t.dtype} {tuple(t.shape)}")
    return t.permute(0, 3, 1, 2).contiguous()  # [N, 3, 32, 32]


# ---------------------------------------------------------------------------------------------
# training


def _writable_folder(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise FedcondError(
            f"cannot write the encoder to {folder} ({exc.strerror or exc}); choose a writable "
            f"folder with $FEDCOND_DATA or an output directory"
        ) from None
    return folder


def _atomic_write(path: Path, write: Callable[[object], None]) -> None:
    """Write through ``write(fileobj)`` into a temporary file next to ``path``, then rename it over ``path``."""
    from .data.paths import file_mode

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _channel_stats(x: torch.Tensor, chunk: int = 4096) -> tuple[list[float], list[float]]:
    """Per-channel mean and std of uint8 [N, 3, H, W] on the [0, 1] scale, in chunks (CIFAR in float64 is 1.2 GB)."""
    total, total_sq = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    for i in range(0, len(x), chunk):
        c = x[i : i + chunk].to(torch.float64).div_(255.0)  # [b, 3, H, W]
        total += c.sum(dim=(0, 2, 3))
        total_sq += c.square().sum(dim=(0, 2, 3))
    count = x.shape[0] * x.shape[2] * x.shape[3]
    mean = total / count
    std = (total_sq / count - mean.square()).clamp_min(0).sqrt().clamp_min(1e-3)
    return mean.tolist(), std.tolist()


@torch.no_grad()
def _accuracy(model: CrossEncoder, x: torch.Tensor, y: torch.Tensor, batch: int = 1024) -> float | None:
    if len(x) == 0:
        return None
    model.eval()
    correct = 0
    for i in range(0, len(x), batch):
        correct += int((model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum())
    return correct / len(x)


@with_mode
def _train_on(
    data,
    source: str,
    out_dir: str | Path | None = None,
    epochs: int = 50,
    lr: float = 1e-3,
    batch_size: int = 128,
    seed: int = 0,
    progress: Callable[[dict], None] | None = None,
    limit: int | None = None,
    blocks_per_stage: int = 1,
) -> Path:
    """Train an encoder on ``data`` (anything with x_train/y_train/x_test/y_test uint8 [N,32,32,3] and
    ``classes``), save it as the encoder of ``source`` under ``<out_dir>/encoders`` and return the .pt path."""
    source = check_source(source)
    if epochs < 1 or batch_size < 1 or (limit is not None and limit < 1):
        raise FedcondError(f"epochs, batch_size and limit must be positive (got {epochs}, {batch_size}, {limit})")
    path = _writable_folder(encoder_dir(out_dir)) / f"encoder-{source}.pt"  # fail before training, not after
    x_train, x_test = _as_nchw(data.x_train), _as_nchw(data.x_test)  # [N, 3, 32, 32]
    y_train = torch.as_tensor(np.asarray(data.y_train), dtype=torch.int64)
    y_test = torch.as_tensor(np.asarray(data.y_test), dtype=torch.int64)
    if limit is not None and limit < len(x_train):  # a seeded random subset, not the first rows (often sorted)
        keep = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(seed))[:limit].sort().values
        x_train, y_train = x_train[keep], y_train[keep]
    n = len(x_train)
    if n == 0:
        raise FedcondError(f"encoder source {source} has no training images")
    num_classes = len(data.classes)
    mean, std = _channel_stats(x_train)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):  # seeded init without disturbing the caller's RNG
            torch.manual_seed(seed)
            model = CrossEncoder(num_classes, blocks_per_stage, mean, std)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        shuffle = torch.Generator().manual_seed(seed)
        started = time.perf_counter()
        for epoch in range(1, epochs + 1):
            t0 = time.perf_counter()
            model.train()
            order = torch.randperm(n, generator=shuffle)
            total_loss, correct = 0.0, 0
            for i in range(0, n, batch_size):
                idx = order[i : i + batch_size]
                xb, yb = x_train[idx], y_train[idx]  # [b, 3, 32, 32], [b]
                logits = model(xb)  # [b, K]
                loss = F.cross_entropy(logits, yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total_loss += loss.item() * len(idx)
                correct += int((logits.argmax(1) == yb).sum())
            if progress is not None:
                progress(
                    {
                        "epoch": epoch,
                        "epochs": epochs,
                        "loss": total_loss / n,
                        "train_accuracy": correct / n,
                        "seconds": time.perf_counter() - t0,
                    }
                )
        seconds = time.perf_counter() - started
        test_accuracy = _accuracy(model, x_test, y_test)
    finally:
        torch.set_num_threads(threads)

    meta = {
        "epochs": epochs,
        "seed": seed,
        "lr": lr,
        "batch_size": batch_size,
        "limit": limit,
        "test_accuracy": test_accuracy,
        "train_samples": n,
        "test_samples": len(x_test),
        "classes": list(data.classes),
        "train_seconds": round(seconds, 1),
    }
    save_encoder(model, source, path, meta)
    return path


def save_encoder(model: CrossEncoder, source: str, path: Path, meta: dict | None = None) -> Path:
    """Write ``model`` to ``path`` and its JSON sidecar (``meta`` plus source, architecture, torch
    version and the file's sha256), each atomically, the .pt first."""
    source = check_source(source)
    payload = {"format": _FORMAT, "source": source, "config": model.config(), "state_dict": model.state_dict()}
    _atomic_write(path, lambda f: torch.save(payload, f))
    side = {
        "source": source,
        **(meta or {}),
        "architecture": {"embed_dim": EMBED_DIM, **model.config()},
        "torch": torch.__version__,
        "sha256": sha256_file(path),
    }
    _atomic_write(sidecar_path(path), lambda f: f.write((json.dumps(side, indent=2) + "\n").encode()))
    return path


def train_encoder(
    source: str,
    data_dir: str | Path | None = None,
    epochs: int = 50,
    lr: float = 1e-3,
    batch_size: int = 128,
    seed: int = 0,
    progress: Callable[[dict], None] | None = None,
    limit: int | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Train the encoder on ``source`` (read from ``data_dir``) and save it under ``<out_dir>/encoders``.

    ``out_dir`` defaults to ``data_dir`` (both resolved by ``resolve_data_dir``). ``progress``,
    if given, is called after every epoch with a dict: epoch, epochs, loss, train_accuracy,
    seconds. ``limit`` caps the training samples (a seeded random subset). Returns the .pt path;
    the test accuracy is in the JSON sidecar (``read_sidecar``).
    """
    source = check_source(source)
    out = data_dir if out_dir is None else out_dir
    _writable_folder(encoder_dir(out))  # before the (slow) data loading
    return _train_on(
        source_data(source, data_dir),
        source,
        out,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
        limit=limit,
    )


# ---------------------------------------------------------------------------------------------
# loading and use


def read_sidecar(source: str, data_dir: str | Path | None = None) -> dict:
    """The JSON sidecar of an encoder (source, epochs, seed, test_accuracy, sha256, ...)."""
    path = encoder_path(source, data_dir)
    meta = sidecar_path(path)
    if not meta.is_file():
        raise FedcondError(
            f"encoder {check_source(source)} has no sidecar {meta}; make it with "
            f"`{train_command(check_source(source), data_dir)}`"
        )
    try:
        return json.loads(meta.read_text())
    except (OSError, ValueError) as exc:
        raise FedcondError(
            f"cannot read the encoder sidecar {meta} ({exc}); make it again with "
            f"`{train_command(check_source(source), data_dir)}`"
        ) from None


def load_encoder(source: str, data_dir: str | Path | None = None) -> CrossEncoder:
    """The frozen encoder trained on ``source``, in eval mode, after checking its sha256 against the sidecar."""
    source = check_source(source)
    path = encoder_path(source, data_dir)
    fix = f"`{train_command(source, data_dir)}`"
    if not path.is_file():
        raise FedcondError(f"encoder {source} not found: no {path}; make it with {fix}")
    meta = read_sidecar(source, data_dir)
    actual = sha256_file(path)
    if actual != meta.get("sha256"):
        raise ChecksumMismatch(
            f"encoder file {path} has sha256 {actual[:12]}..., its sidecar expects "
            f"{str(meta.get('sha256'))[:12]}...; the file is damaged or stale: make it again with {fix}"
        )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
        cfg = payload["config"]
        model = CrossEncoder(cfg["num_classes"], cfg["blocks_per_stage"], cfg["mean"], cfg["std"])
        model.load_state_dict(payload["state_dict"])
    except Exception as exc:  # a file that matches its sidecar but is not an encoder of this version
        raise FedcondError(
            f"encoder file {path} cannot be read ({type(exc).__name__}); make it again with {fix}"
        ) from None
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def encoder_features(encoder: CrossEncoder, batch_size: int = 1024) -> Callable[[torch.Tensor], torch.Tensor]:
    """phi for CIFAR data (see ``fedcond.stats``): uint8 [n, 3, 32, 32] -> float64 [n, 128], batched, no grad."""
    encoder.eval()

    def phi(x: torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(x)
        if x.ndim != 4 or tuple(x.shape[1:]) != (3, 32, 32):
            raise FedcondError(f"the CIFAR encoder takes images [n, 3, 32, 32], got {tuple(x.shape)}")
        if len(x) == 0:
            return torch.zeros(0, EMBED_DIM, dtype=torch.float64)
        was_training = encoder.training
        encoder.eval()
        with torch.no_grad():
            out = torch.cat([encoder.embed(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])  # [n, 128]
        encoder.train(was_training)
        return out.to(torch.float64)

    return phi
