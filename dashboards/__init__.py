"""grafanalib dashboard sources and their builder."""
