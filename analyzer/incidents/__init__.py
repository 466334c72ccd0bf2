"""The incident: its record, lifecycle, store, on-call actions and maintenance windows."""
