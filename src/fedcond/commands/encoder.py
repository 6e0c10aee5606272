"""`fedcond encoder train`: the cross-trained encoder that gives CIFAR clients their statistics,
trained on its source dataset and cached in the data directory."""

from __future__ import annotations

import sys


def encoder_command(args) -> int:
    import torch
    from tqdm import tqdm

    from ..encoder import train_encoder

    torch.set_num_threads(1)
    bar = tqdm(total=args.epochs, unit="epoch", desc=f"encoder {args.source}", file=sys.stderr)

    def progress(info: dict) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{info['loss']:.3f}", acc=f"{info['train_accuracy']:.3f}")

    try:
        path = train_encoder(
            args.source, args.data_dir, epochs=args.epochs, seed=args.seed, progress=progress, out_dir=args.out_dir
        )
    finally:
        bar.close()
    print(path)
    return 0
