"""How a step's next tokens are drawn, on one of three paths: from the whole vocabulary's
logits, in Python (any sampling parameters); from the graph's ranked candidates, in Python (a
decoder exported by inferd, when every row's parameters fit its candidates:
inferd.prep.ranked_logits); or in the graph itself (inferd.prep.graph_draw), which takes one
uniform number a row and gives back the tokens, so that several decode steps can run back to
back, each step's tokens fed straight to the next (a block)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from inferd.config.model import GenerationConfig
from inferd.generation.bias import NO_TOKEN, HeldRows
from inferd.generation.decoder import LOGITS, NEXT_IDS, TOP_IDS, TOP_LOGITS, DecoderShape
from inferd.generation.logprobs import score
from inferd.generation.masks import Masks, PendingMasks, allowed_ids
from inferd.generation.params import SamplingParams
from inferd.generation.sampling import (
    draw_inputs,
    fits_ranked,
    sample_allowed,
    sample_batch,
    sample_ranked,
)
from inferd.generation.sequence import Sequence as Seq
from inferd.runtime.protocol import Array

Masked = dict[int, Array]
"""Constrained rows' token masks, by the sequence's id (inferd.generation.constraint)."""

GREEDY = SamplingParams(1, temperature=0.0)
"""What a row that draws nothing (finished, cancelled) is given for the graph's draw."""


class Draw:
    """Which path draws a step's tokens, and the drawing itself (`sample`, `sample_ranked`,
    or the graph's inputs: `feed`)."""

    def __init__(self, shape: DecoderShape, config: GenerationConfig) -> None:
        self._shape = shape
        self.in_graph = config.block_steps > 0 and shape.draws
        """Whether ranked draws are the graph's (inferd.prep.graph_draw), not Python's."""
        self._graph_names = (NEXT_IDS, *shape.present_names)
        self._ranked_names = tuple(shape.ranked_names)
        self._output_names = tuple(shape.output_names)
        self._masks = Masks()
        self._biased_rows = 0
        """How many of the bias's first rows may still hold a past step's mask."""

    def masks(self, seqs: list[Seq]) -> PendingMasks | None:
        """Starts the token masks of the constrained rows of `seqs` (None when there are
        none), before the step whose tokens they hold to their grammars."""
        return self._masks.start(seqs)

    def close(self) -> None:
        self._masks.close()

    def bias(self, feeds: dict[str, Array], rows: list[Seq], live: list[int]) -> HeldRows | None:
        """Before a step that ranks in the graph: the masks of its live constrained rows
        into the graph's bias, zeros for the others (where a past step left a mask); the
        rows, for a block to carry on (None when none is constrained)."""
        if not self._shape.bias:
            return None
        held = [r for r in live if rows[r].constraint is not None]
        if not held and self._biased_rows == 0:
            return None
        rows_held = HeldRows(rows, held, self._shape.bias)
        rows_held.write(feeds)
        rows_held.fail_broken()
        if held:
            self._biased_rows = max(self._biased_rows, len(rows))
        elif len(rows) >= self._biased_rows:
            self._biased_rows = 0  # (every row that held a mask is zero again)
        return rows_held if held else None

    def ranked(self, seqs: list[Seq], biased: bool = False) -> bool:
        """Whether the next tokens of `seqs` can all be drawn from the graph's ranked
        candidates (a decoder exported by inferd), not the whole vocabulary's logits. A
        constrained row can when the step feeds the graph its mask (`biased`, and a graph
        that takes one: `bias`): unmasked, its candidates may hold none it may take."""
        width = self._shape.top_width
        masked = biased and self._shape.bias > 0
        return width > 0 and all(
            (s.constraint is None or masked) and fits_ranked(s.params, width) for s in seqs
        )

    def blocks(self, rows: list[Seq], live: list[int], advances: bool) -> bool:
        """Whether the next steps draw in the graph, each step's tokens fed straight to the
        next (a block): a drawing in-place decoder (its KV store `advances`), every row live
        and drawing within the graph's candidates."""
        return self.in_graph and advances and len(live) == len(rows) and self.ranked(rows, True)

    def names(self, ranked: bool, in_graph: bool = False) -> Sequence[str]:
        """The outputs a step asks for: the drawn tokens (and the cache), the ranked
        candidates, or the logits."""
        if in_graph:
            return self._graph_names
        return self._ranked_names if ranked else self._output_names

    def decoded(
        self,
        out: dict[str, Array],
        live: list[int],
        seqs: list[Seq],
        ranked: bool,
        in_graph: bool,
        masks: Masked | None = None,
    ) -> list[int]:
        """The next tokens of the `live` rows (`seqs`) after a decode step, by its path."""
        if in_graph:
            chosen: list[int] = out[NEXT_IDS][live, 0].tolist()
            return chosen
        if ranked:
            return self.sample_ranked(out, live, seqs)
        return self.sample(out[LOGITS][live, -1, :], seqs, masks)

    def feed(self, feeds: dict[str, Array], rows: list[Seq], live: set[int], steps: int) -> Array:
        """Puts the graph's draw inputs for `rows` in `feeds` (rows not `live`: greedy, drawing
        nothing); returns the uniform numbers of `steps` steps [steps, rows], the first step's
        fed: one a step from each live drawing row's own generator, as Python's draw takes."""
        uniforms = np.zeros((steps, len(rows)))
        params = []
        for r, seq in enumerate(rows):
            if r in live and not seq.params.greedy:
                uniforms[:, r] = seq.rng.random(steps)
            params.append(seq.params if r in live else GREEDY)
        # in place: every store's decode step holds the draw inputs (greedy), and the in-place
        # store's are its own buffers, which a kept binding reads
        for name, values in draw_inputs(params, uniforms[0], self._shape.top_width).items():
            feeds[name][...] = values
        return uniforms

    def sample_ranked(
        self, out: dict[str, Array], rows: list[int] | slice, seqs: list[Seq]
    ) -> list[int]:
        return sample_ranked(
            out[TOP_LOGITS][rows],
            out[TOP_IDS][rows],
            [s.params for s in seqs],
            [s.rng for s in seqs],
        )

    def sample(self, logits: Array, seqs: list[Seq], masks: Masked | None = None) -> list[int]:
        """From the whole vocabulary's logits; a constrained row's only among the tokens its
        mask allows (`masks`, by the sequence's id)."""
        tokens = self._drawn(logits, seqs, masks or {})
        for r, seq in enumerate(seqs):
            if seq.params.logprobs is not None:  # (from the model's logits, as they came)
                seq.offer(score(logits[r], tokens[r], seq.params.logprobs))
        return tokens

    def _drawn(self, logits: Array, seqs: list[Seq], masks: Masked) -> list[int]:
        held = [r for r, s in enumerate(seqs) if id(s) in masks]
        if not held:
            return _sample(logits, seqs)
        free = [r for r, s in enumerate(seqs) if id(s) not in masks]
        rows = [seqs[r] for r in held]
        vocab = logits.shape[1]
        allowed = [allowed_ids(masks[id(s)], vocab) for s in rows]
        for seq, tokens_allowed in zip(rows, allowed, strict=True):
            if tokens_allowed.size == 0:  # (that row alone fails; its draw is not taken)
                seq.fail(NO_TOKEN)
        allowed = [a if a.size else np.arange(vocab) for a in allowed]
        tokens = sample_allowed(
            [logits[r] for r in held],
            allowed,
            [s.params for s in rows],
            [s.rng for s in rows],
            [s.seen for s in rows],
            [s.counts for s in rows],
        )
        if free:
            tokens += _sample(logits[free], [seqs[r] for r in free])
        out = [0] * len(seqs)
        for r, token in zip(held + free, tokens, strict=True):
            out[r] = token
        return out


def _sample(logits: Array, seqs: list[Seq]) -> list[int]:
    return sample_batch(
        logits,
        [s.params for s in seqs],
        [s.rng for s in seqs],
        [s.seen for s in seqs],
        [s.counts for s in seqs],
    )
