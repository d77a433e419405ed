"""The evaluation harness: experiments run through the product's own record and recall code.

matching (experiment 1), staleness (2), workload (3: calls saved, and 4: cost), report
(JSON and self-contained HTML). `manage.py ragtrail_eval` runs them.
"""
from trails.evaluation.staleness import random_edit, staleness

__all__ = ["random_edit", "staleness"]
