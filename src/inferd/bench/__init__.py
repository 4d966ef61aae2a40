"""`inferd bench`: a load tester for inferd (or any server with the same endpoints) that sweeps
concurrency or arrival rate, finds the knee, tunes batching settings, compares two targets and
writes a report people can read at a glance. A client: it never imports the server's parts."""
