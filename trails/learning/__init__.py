"""Learning: agents' feedback and the labels it gives, the shipped calibration, and every
path that moves a scope's thresholds."""
