"""Where series come from: files, replay frames, and (later) Prometheus."""
