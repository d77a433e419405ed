"""The evaluation harness: experiments run through the product's own record and recall code.

matching (experiment 1), staleness (2), workload (3: calls saved, and 4: cost), agents
(the scripted and the chat agent of 3), report (JSON and self-contained HTML).
`manage.py ragtrail_eval` runs them.
"""
