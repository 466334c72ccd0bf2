"""The running analyzer: the daemon loop, its API and pages, and the command-line entries."""
