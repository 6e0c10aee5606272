"""`fedcond experiments list`: the paper's configurations by name (a glob or text), or as JSON."""

from __future__ import annotations

import json
import sys


def experiments_command(args) -> int:
    from ..experiments import select

    exps = select(args.pattern)
    if args.json:
        print(
            json.dumps(
                {
                    "count": len(exps),
                    "experiments": [
                        {
                            "name": e.name,
                            "family": e.family,
                            "dataset": e.dataset,
                            "k": e.k,
                            "rotations": e.rotations,
                            "clients_per_cluster": e.clients_per_cluster,
                            "clients": e.clients,
                            "tables": list(e.tables),
                            "paper_setting": e.paper_setting,
                            "methods": list(e.methods),
                        }
                        for e in exps
                    ],
                }
            )
        )
    else:
        for e in exps:
            print(f"{e.name:34s} tables {','.join(e.tables) or '-'}")
        print(f"{len(exps)} experiments", file=sys.stderr)
    return 0
