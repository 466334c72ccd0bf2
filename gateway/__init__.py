"""The instrumented serving front for vLLM: concurrency admission, bounded queue, metrics."""
