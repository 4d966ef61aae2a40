"""The repository's versions: the registry of models and versions, a version's record, loading them
(at start, by an admin, for a rollout, for residency) and the engine's life (start, readiness,
abort, close)."""
