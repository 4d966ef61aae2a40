"""The verbs: what a client may ask of a model, one object each (inferd.verbs.verb.Verb) with
its request and answer types, its refusal, its response cache key, how two versions' answers
agree and its HTTP forms. `embed`, `classify`, `rerank` and `infer` are modules here; a kind
may bring its own beside its servable (its row's `own_verb`); `catalog` lists them all.

Between the engine and the front ends: the engine serves a verb through its one entry
(`Engine.serve`), the server builds each form's route, and nothing here imports a web
framework."""
