"""Asynchronous jobs: inference requests queued now and answered later.

A job is the body of an inference route and its route. The server enqueues it (`store`: Redis
Streams with a consumer group when a Redis URL is configured, so several inferd processes
share the work and a process killed mid-job loses nothing; else a store inside the process),
and a `worker` in every process takes jobs when interactive traffic leaves room, runs each
through the route it names, and keeps its answer for a while. Nothing here knows HTTP or the
engine: the server gives the worker how to run a route and when it may take work.
"""
