"""Tables and figures, read from the results database and the published numbers only.

`write_report(db, out_dir)` writes `report.md` (one table per published table and protocol: ours
beside the published value and the difference) and PNG figures; `load_runs`, `load_failed` and
`paper_results` give the underlying rows.
"""

from .data import load_failed, load_runs, paper_results
from .write import write_report

__all__ = ["load_failed", "load_runs", "paper_results", "write_report"]
