"""Logs and metrics. Called from the data path, never calling into it. Imports `config` only."""
