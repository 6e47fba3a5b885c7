"""Corpus transcription on Ray Data: a folder, glob or manifest of audio files -> one JSONL row per file.

`inputs` lists the files (and a manifest's per-file language); `rows` makes the output rows and the key
that lets a rerun skip what is done (the file's content hash and the options); `reading` is the read
stage (Ray tasks: hash, skip or decode the audio); `pipeline` the actor pool that loads the model pair
once per actor and decodes batches; `store` writes rows atomically into the output folder and reads them
back on resume; `run` drives a run from the driver (Ray session, progress, summary); `summary` its
figures; `command` is `python -m specdec corpus`. Only the CLI imports this wing, and Ray is imported
only when a corpus is transcribed.
"""
