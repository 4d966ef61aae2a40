"""Which versions are in memory: residency under the count, host and GPU memory budgets, what it
counts of each version, each client's on-demand loads, and the heap kept out of the collector's
scans after loads."""
