"""A real vLLM engine beside the stack: its own pinned environment, a tiny generated model, the process."""
