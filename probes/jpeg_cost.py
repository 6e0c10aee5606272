"""Probe: what does this project's JPEG-derived CIFAR-10 copy cost the paper's CNN?

Every CIFAR-10 method with a model per cluster or client lands 2.3-3.8 pp below its published value
(E1/cifar10/K=2/rich). The shared copy is the source's JPEG files (quality 75), not the official
lossless pickles, and no full lossless copy is to be had here. Public repositories do hold
*prefixes* of the official `cifar-10-batches-py` files (a stored file cut at a few MiB): the first
~1,000 images of each batch, pixels intact. That is enough for a paired measurement:

  1. read each prefix's labels and pixels without unpickling (the file is data, never code: the
     pixel block is the pickle's one 30,720,000-byte string, the labels the BININT1 items before it);
  2. find each lossless image in the JPEG copy (same label, nearest 8x8 thumbnail, then its PSNR:
     a match is one image at ~30 dB, the runner-up far behind);
  3. train the cell's per-cluster task (E1 K=2's groups: vehicles, animals) twice from the same
     initialisation and batch order, once on the lossless pixels and once on the JPEG copy of the
     very same images; score each on the matching test images of its own kind (and across).

The difference is the JPEG copy's cost at this data size (a few thousand images per model, about
Local's per-client size in E1 K=2 rich; Oracle trains on five times more).

    fetch github:zhi-fangZhang/idpl_gen   # its data/cifar-10-batches-py/* are 3 MiB prefixes
    git -C <mirror> cat-file -p HEAD:data/cifar-10-batches-py/data_batch_1 > <dir>/data_batch_1   (1-5, test_batch)
    python probes/jpeg_cost.py --lossless <dir> --seeds 0,1,2 --out docs/results/readings/jpeg_cost.jsonl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fedcond.data.formats.cifar_pickle import rows_to_hwc  # a cut file cannot go through its safe unpickler
from fedcond.data.registry import load
from fedcond.engine import Job, LoopEngine, SGDConfig, predict
from fedcond.models.cpu_kernels.build import cpu_model, vector_isa
from fedcond.models.spec import ModelSpec
from fedcond.scenarios.groupings import E1_SEMANTIC
from probe_output import emit  # probes/ is on the path when a probe runs as a script

PIXELS = 30_720_000  # 10,000 images x 3,072 bytes: the length of every batch's pixel string
BINSTRING = b"T" + PIXELS.to_bytes(4, "little")  # pickle protocol 2's BINSTRING opcode and length


def read_prefix(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(x uint8 [m, 32, 32, 3], y [m]) from an official CIFAR-10 python batch, complete or cut short."""
    raw = path.read_bytes()
    start = raw.find(BINSTRING)
    at = raw.find(b"labels")
    if start < 0 or at < 0 or at > start:
        sys.exit(f"{path}: not an official CIFAR-10 python batch (no labels list before the pixel string)")
    start += len(BINSTRING)
    m = min(10_000, (len(raw) - start) // 3072)
    x = rows_to_hwc(np.frombuffer(raw[start : start + m * 3072], np.uint8).reshape(m, 3072), str(path))
    labels, p = [], raw.find(b"]", at) + 1  # EMPTY_LIST; then MARK, BININT1 items, APPENDS, in chunks of 1,000
    while p < start and len(labels) < 10_000:
        op = raw[p : p + 1]
        if op == b"K":
            labels.append(raw[p + 1])
            p += 2
        elif op in (b"(", b"e"):
            p += 1
        elif op == b"q":  # BINPUT memo index
            p += 2
        else:
            break
    if len(labels) != 10_000 or max(labels) > 9:
        sys.exit(f"{path}: read {len(labels)} labels, expected 10,000 in 0..9")
    return x, np.array(labels[:m], dtype=np.int64)


def thumbs(x: np.ndarray) -> np.ndarray:
    return x.reshape(len(x), 8, 4, 8, 4, 3).astype(np.float32).mean(axis=(2, 4)).reshape(len(x), -1)


def match(x: np.ndarray, y: np.ndarray, pool_x: np.ndarray, pool_y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Index into the pool of each lossless image's JPEG copy, each match's PSNR (dB), and the smallest
    runner-up / best thumbnail-distance ratio (how unambiguous the worst match was)."""
    tq, tp = thumbs(x), thumbs(pool_x)
    idx, ratio = np.empty(len(x), np.int64), np.inf
    for c in range(10):
        q, cand = np.where(y == c)[0], np.where(pool_y == c)[0]
        for lo in range(0, len(q), 256):
            qq = q[lo : lo + 256]
            d = ((tq[qq, None, :] - tp[None, cand, :]) ** 2).mean(-1)
            two = np.argsort(d, axis=1)[:, :2]
            idx[qq] = cand[two[:, 0]]
            rows = np.arange(len(qq))
            ratio = min(ratio, float((d[rows, two[:, 1]] / np.maximum(d[rows, two[:, 0]], 1e-9)).min()))
    mse = ((pool_x[idx].astype(np.float32) - x) ** 2).mean(axis=(1, 2, 3))
    if len(set(idx.tolist())) != len(idx):
        sys.exit("two lossless images matched one JPEG image: the prefixes are not this copy's images")
    return idx, 10 * np.log10(255.0**2 / np.maximum(mse, 1e-9)), ratio


def tensor(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lossless", type=Path, required=True, help="folder of data_batch_1..5, test_batch (prefixes)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=20, help="passes over each model's data (the protocol's 20)")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, one per seed and group")
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = load("cifar10")
    xs, ys = zip(*(read_prefix(a.lossless / f"data_batch_{k}") for k in range(1, 6)))
    train_ll, train_y = np.concatenate(xs), np.concatenate(ys)
    test_ll, test_y = read_prefix(a.lossless / "test_batch")
    i_tr, psnr_tr, r_tr = match(train_ll, train_y, data.x_train, data.y_train)
    i_te, psnr_te, r_te = match(test_ll, test_y, data.x_test, data.y_test)
    train_jp, test_jp = data.x_train[i_tr], data.x_test[i_te]
    print(f"matched {len(i_tr)} train / {len(i_te)} test images; PSNR of the copy: median {np.median(psnr_tr):.2f} / "
          f"{np.median(psnr_te):.2f} dB, min {psnr_tr.min():.1f} / {psnr_te.min():.1f}; worst runner-up ratio "
          f"{r_tr:.1f} / {r_te:.1f}", flush=True)
    mean = tuple(float(v) for v in (data.x_train.reshape(-1, 3).mean(0) / 255))  # the copy's, for both arms alike
    std = tuple(float(v) for v in (data.x_train.reshape(-1, 3).std(0) / 255))
    engine = LoopEngine(SGDConfig(precision=a.precision))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for seed in (int(s) for s in a.seeds.split(",")):
        for group, classes in zip(("vehicles", "animals"), E1_SEMANTIC["cifar10"][2]):
            remap = {c: i for i, c in enumerate(classes)}
            tr = np.isin(train_y, classes)
            te = np.isin(test_y, classes)
            y_tr = torch.tensor([remap[c] for c in train_y[tr]])
            y_te = torch.tensor([remap[c] for c in test_y[te]])
            spec = ModelSpec((3, 32, 32), len(classes), mean=mean, std=std)
            torch.manual_seed(seed)
            init = {k: v.clone() for k, v in spec.build().state_dict().items()}
            row = {"seed": seed, "group": group, "n_train": int(tr.sum()), "n_test": int(te.sum()),
                   "epochs": a.epochs, "precision": a.precision, "psnr_train_median": float(np.median(psnr_tr[tr])),
                   "cpu": f"{cpu_model()} ({vector_isa()})"}
            models = {}
            for arm, x in (("lossless", train_ll[tr]), ("jpeg", train_jp[tr])):
                t0 = time.time()
                job = Job(params=init, x=tensor(x), y=y_tr, s=None, epochs=a.epochs, seed=(seed, 0xC1FA))
                models[arm] = engine.train(spec, [job])[0].params
                row[f"train_s_{arm}"] = round(time.time() - t0, 1)
            model = engine.model(spec)
            for arm in ("lossless", "jpeg"):
                for kind, x in (("lossless", test_ll[te]), ("jpeg", test_jp[te])):
                    pred = predict(model, models[arm], tensor(x), None)
                    row[f"acc_{arm}_on_{kind}"] = float((pred == y_te).float().mean())
            row["cost_pp"] = round(100 * (row["acc_lossless_on_lossless"] - row["acc_jpeg_on_jpeg"]), 2)
            emit(row, a.out)


if __name__ == "__main__":
    main()
