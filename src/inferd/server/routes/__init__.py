"""HTTP routes, one module per protocol."""
