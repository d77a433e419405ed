"""The matching and validation logic of ragtrail, in plain Python.

Nothing here imports Django: the API, the operator pages, the benchmarks and the
evaluation all call these functions, and they can be tested without settings.
"""
