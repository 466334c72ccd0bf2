"""Process wiring: local stacks, the demo, child processes and their ports.

Only the command line, the tests and the benchmarks import this package; the processes it starts
(gateway, exporter, simulator, analyzer, reporter) import the core in ``oximeter`` instead.
"""
