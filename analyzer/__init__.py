"""The analyzer: signals, baselines, detectors, correlation, incidents."""
