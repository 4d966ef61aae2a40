"""Every verb the server serves: the built-in ones (each a module of this package) and each
verb a kind brings of its own (its row's `own_verb` in the kinds table, inferd.config.kinds),
found by the place the row names. The data plane's routes are their forms."""

from __future__ import annotations

import functools
import importlib
from typing import Any

from inferd.config.kinds import KINDS
from inferd.verbs.classify import CLASSIFY
from inferd.verbs.embed import EMBED
from inferd.verbs.infer import INFER
from inferd.verbs.rerank import RERANK
from inferd.verbs.verb import Verb

BUILT_IN: tuple[Verb[Any, Any], ...] = (CLASSIFY, EMBED, RERANK, INFER)


def own_verb(place: str) -> Verb[Any, Any]:
    """The verb at `module:NAME`."""
    module, _, name = place.partition(":")
    verb = getattr(importlib.import_module(module), name)
    if not isinstance(verb, Verb):
        raise TypeError(f"{place} is not a verb")
    return verb


@functools.cache
def all_verbs() -> tuple[Verb[Any, Any], ...]:
    own = [own_verb(k.own_verb) for k in KINDS.values() if k.own_verb is not None]
    verbs = (*BUILT_IN, *own)
    names = [v.name for v in verbs]
    if len(set(names)) != len(names):
        raise ValueError(f"two verbs share a name: {names}")
    return verbs
