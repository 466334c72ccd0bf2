"""The analyzer, in stage packages that read in the order data flows: signals -> detection ->
diagnosis -> incidents -> service (each imports only the stages before it)."""
