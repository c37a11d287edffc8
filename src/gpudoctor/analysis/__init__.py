"""Pure functions from records to numbers and Findings: no torch, no I/O, no printing."""
