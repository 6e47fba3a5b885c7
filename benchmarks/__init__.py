"""specdec's benchmarks: outside the installed package, on its public interfaces only (the engine's
`decode_clips` with a drafter plug-in and an encoder memo, the API, the trace). Run from a checkout:
`python -m benchmarks NAME` (see benchmarks/__main__.py)."""
