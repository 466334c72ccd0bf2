"""Drills: rehearse fault scenarios against the analyzer and score its diagnosis against their truth.

``history`` (the windows a drill replays and their cached histories), ``replay`` (those histories
through the analyzer), ``live`` (faults injected into a running stack), ``score`` (the verdict),
``stock`` (why stock telemetry cannot judge a drill) and ``cli`` (``oximeter drill``).
"""
