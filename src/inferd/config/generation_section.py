"""A generative model's `generation` section: context, batching of sequences, decode steps,
the KV cache's placement, and chat prompts."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inferd.config.section import Section


class GenerationConfig(Section):
    context_length: int = Field(
        1024, ge=2, description="Most tokens a sequence may hold, prompt and output together."
    )
    eos_token_id: int | None = Field(
        None, description="The token that ends a sequence; default: the tokenizer's EOS token."
    )
    max_new_tokens: int = Field(
        128, ge=1, description="New tokens when a request does not say (max_length)."
    )
    max_new_tokens_limit: int = Field(
        1024, ge=1, description="Most new tokens a request may ask for (4004 above)."
    )
    max_running: int = Field(
        16, ge=1, description="Most sequences decoded together in one step (continuous batch)."
    )
    max_kv_tokens: int = Field(
        32768,
        ge=16,
        description="Most tokens held in the KV cache over all running sequences, padding "
        "included; a waiting request joins when its prompt and output fit. An in-place decoder "
        "(`inferd export --kv-cache inplace`) holds context_length positions a row, allocated "
        "once for min(max_running, max_kv_tokens / context_length) rows.",
    )
    max_waiting: int = Field(
        256, ge=1, description="Most requests waiting to join the batch (4290 above)."
    )
    prefill_chunk: int = Field(
        4, ge=1, description="Most waiting requests admitted (prefilled) at one decode step."
    )
    inline_step_ms: float = Field(
        10.0,
        ge=0,
        description="Decode steps and prefills expected to take less than this (as the last "
        "ones ran) run on the event loop's own thread, between its other work, instead of "
        "being handed to a runtime thread and back: the handoff costs a quarter of a 1 ms "
        "step (a third of a 0.9 ms prefill), and the loop's work during a step on another "
        "thread made a 7 ms step 7% longer on two cores. Other requests then wait at most "
        "one step or prefill. 0: every step and prefill on a runtime thread.",
    )
    cache_placement: Literal["auto", "device", "host"] = Field(
        "auto",
        description="Where an in-place decoder's KV cache and drawn tokens live: device, the "
        "instance's own memory (on a GPU the cache never crosses the bus; a step copies its "
        "few small inputs in and its tokens out); host, numpy arrays that ONNX Runtime copies "
        "to the device and back at every step. auto: device, except for an FP32 cache on a "
        "GPU, whose attention (GroupQueryAttention) ONNX Runtime's CUDA provider runs in "
        "FP16 and BF16 only: it runs on the CPU, where a host cache saves copying the whole "
        "cache each step. The same memory on a CPU instance.",
    )
    block_steps: int = Field(
        4,
        ge=0,
        description="Decode steps run back to back without Python in between, where the "
        "decoder draws in its own graph (`inferd export` adds the draw), its KV cache is in "
        "place (`--kv-cache inplace`) and every running sequence's draw fits the graph's "
        "(top-k within its candidates, no repetition penalty): each step's tokens go straight "
        "back in as the next step's input, and are taken, streamed and counted once per "
        "block. A block ends early for a sequence's last token, within inline_step_ms "
        "when its steps run on the event loop's thread (a request waiting for a row waits for "
        "the block: shorter blocks let it join sooner), and on a runtime thread when a "
        "request arrives. 1: a step at a time, drawn in the graph; 0: a step at a time, "
        "drawn in Python (the graph's draw unused).",
    )
    jump_forward: int = Field(
        2,
        ge=0,
        description="A constrained answer (a JSON schema, a regex, a choice, a tool call) "
        "whose grammar forces at least this many next tokens (a JSON object's next key with "
        "its quotes and colon) takes them without the model drawing them: in one step of its "
        "row that computes them all and draws the token after them, where that costs less "
        "than the row's share of as many batch steps (few rows running), else one a step "
        "with the batch, without the grammar's mask work. The answer is the same either way. "
        "Where the KV cache is in place, for answers that ask for no log-probabilities. "
        "0: every token drawn.",
    )
    scheduling: Literal["continuous", "static"] = Field(
        "continuous",
        description="continuous: requests join and leave the running batch at every step; "
        "static: a batch runs until its longest sequence ends (the baseline, for comparison).",
    )
    chat_template: str | None = Field(
        None,
        description="The Jinja template that turns `/v1/chat/completions` messages into a "
        "prompt (Hugging Face's form); default: `chat_template` in the model's "
        "tokenizer_config.json, else one `role: content` line per message.",
    )
    chat_content_special_tokens: bool = Field(
        False,
        description="Whether special tokens written in a chat message's content (`<|system|>`, "
        "`<|assistant|>`, `<|endoftext|>`...) act as the control tokens they name. Off, content "
        "is tokenized with its special tokens read as text: a user cannot open a system or "
        "assistant turn, nor end the text, by writing the token; only the chat template's "
        "own control tokens are control tokens. On only for clients trusted to write raw "
        "turns.",
    )
