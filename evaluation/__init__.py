"""The evaluation and the benchmarks: beside the product, never imported by it.

Every experiment runs ragtrail's own record() and recall(); the commands here print
(or write as a report) what they measured.
"""
