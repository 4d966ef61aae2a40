"""Text generation: sampling, incremental detokenization, a padded KV cache and the
iteration-level (continuous) batching scheduler that drives a decoder's ONNX session."""
