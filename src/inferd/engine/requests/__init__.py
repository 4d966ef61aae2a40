"""A request's way through the engine: admission (in flight, memory, drain), what it would be
refused with before its body is read, which version answers it, the response cache around every
verb, how generations start, and what its outcome feeds (statistics, rollouts, agreement between
versions)."""
