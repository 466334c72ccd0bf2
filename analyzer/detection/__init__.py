"""Which series misbehave: baselines, detectors and persistence over a signal's frame, to anomaly events."""
