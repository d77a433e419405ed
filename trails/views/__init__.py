"""Operator pages, one module per page family; each renders its page or, for htmx, the
fragment it swaps. Templates live under templates/trails/<family>/."""
