"""`fedcond data list | verify | download`: the datasets, and whether each is present and intact."""

from __future__ import annotations

from ..errors import FedcondError


def data_command(args) -> int:
    from .. import data

    if args.data_command == "list":
        root = data.resolve_data_dir(None)
        print(f"data directory: {root}")
        for name in data.DATASETS:
            try:
                data.verify(name, None)
                state = "present"
            except FedcondError:
                state = "missing"
            print(f"  {name:16s} {state}")
        return 0
    if args.data_command == "verify":
        print(data.verify(args.name, args.data_dir))
        return 0
    paths = data.download(args.name, args.data_dir, force=args.force)
    for p in paths:
        print(p)
    return 0
