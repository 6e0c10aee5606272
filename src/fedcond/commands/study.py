"""`fedcond study synthetic | emnist`: the earlier study (SPEC Part B), printed as tables."""

from __future__ import annotations


def study_command(args) -> int:
    import torch

    torch.set_num_threads(1)
    if args.study_command == "synthetic":
        from ..study.synthetic import main as synthetic_main

        synthetic_main(seed=args.seed)
    else:
        from ..study.emnist import main as emnist_main
        from ..engine import check_device

        check_device(args.device)
        emnist_main(args.data_dir, device=args.device, seed=args.seed)
    return 0
