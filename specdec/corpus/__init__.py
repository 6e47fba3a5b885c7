"""Corpus transcription on Ray Data: a folder, glob or manifest of audio files -> one JSONL row per file.

`inputs` lists the files (and a manifest's per-file language); `rows` makes the output rows (one per
path), their key (the file's content hash and the options) and what a rerun reuses; `reading` is the
read stage (Ray tasks: hash, skip or decode the audio); `pipeline` the actor pool that loads the model
pair once per actor and decodes batches; `store` writes rows atomically into the output folder and reads
them back on resume; `run` drives a run from the driver (Ray session, progress, summary); `summary` its
figures; `quiet` keeps one notice of Ray's off stderr; `watchdog` ends the Ray a killed run started;
`command` is `python -m specdec corpus`. Only the CLI imports this wing, and Ray is imported only when a
corpus is transcribed.
"""
