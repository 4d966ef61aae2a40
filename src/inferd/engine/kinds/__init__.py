"""What a loaded version does, one servable a kind: the `Servable` base, tensors, text (embeddings,
classifiers), zero-shot, reranking, generation, and what each is built from (a batcher over
runtime instances, the tokenizer pipeline, a decoder's parts, tensor specs and checks)."""
