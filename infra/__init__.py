"""The plumbing every app stands on, below them all: errors and the API's error shape, strict
JSON bodies, load shedding, the database deadline, metrics, environment settings, prepared
statements and section hashing. It imports no app (scopes, trails, evaluation) and no wiring
(ragtrail_site)."""
