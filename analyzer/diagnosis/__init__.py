"""What the anomalies mean: correlation into groups, the topology join, the diagnosis rules."""
