"""Prometheus metrics of the broker (``--metrics-listen HOST:PORT``); see recorder.py."""
