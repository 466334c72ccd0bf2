"""A vLLM-compatible engine and a simulated GPU fleet with injectable faults (always says so)."""
