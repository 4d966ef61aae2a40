"""Command line: `inferd serve`, `inferd repo check`. May import every part."""
